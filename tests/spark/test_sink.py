"""ParquetSink: date partitions, atomic commits, acknowledgement after commit, de-duplication
and a kill -9 of a real silo process (SQLite stream adapter)."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from orleanspy import Silo, SiloOptions
from orleanspy.spark import ParquetSink, ParquetSinkOptions, ParquetSinkWriter
from orleanspy.spark.sink import stream_slug
from orleanspy.streams import (
    MemoryAdapterFactory,
    PersistentStreamProvider,
    SqliteAdapterFactory,
    StreamId,
    StreamProviderOptions,
    implicit_subscription,
)
from orleanspy.streams.mapper import HashRingQueueMapper
from orleanspy.streams.tokens import SequenceToken
from tests.integration.silo_process import SiloLauncher, poll_until

from .conftest import WAIT

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

DAY = 86_400_000
HOUR = 3_600_000
BASE = int(dt.datetime(2024, 3, 1, tzinfo=dt.UTC).timestamp() * 1000)


def read_dataset(root: Path) -> list[dict[str, Any]]:
    """Every row of every visible file (each file read whole: a torn file raises)."""
    rows: list[dict[str, Any]] = []
    for path in sorted(root.glob("date=*/hour=*/*.parquet")):
        table = pq.read_table(path)
        day = path.parent.parent.name.removeprefix("date=")
        for row in table.to_pylist():
            row["_date"] = day
            rows.append(row)
    return rows


class Landed:
    def __init__(self) -> None:
        self.events = 0
        self.changed = asyncio.Event()


@implicit_subscription("clicks")
class ClickSink(ParquetSink):
    sink_options = ParquetSinkOptions(path="lake", timestamp_field="ts")

    async def on_commit(self, files: list[str], events: int) -> None:
        landed: Landed = self.silo.landed
        landed.events += events
        landed.changed.set()


async def wait_landed(landed: Landed, count: int) -> None:
    async with asyncio.timeout(WAIT):
        while landed.events < count:
            landed.changed.clear()
            await landed.changed.wait()


async def test_sink_lands_events_partitioned_by_date(tmp_path: Path) -> None:
    provider = PersistentStreamProvider(
        MemoryAdapterFactory(), StreamProviderOptions(total_queues=2, batch_size=256)
    )
    silo = Silo(SiloOptions(gateway_port=None, data_dir=str(tmp_path)), grains=[ClickSink],
                stream_providers={"s": provider})
    silo.landed = Landed()  # type: ignore[attr-defined]
    async with silo:
        for user in ("u1", "u2"):
            stream = silo.get_stream_provider("s").get_stream("clicks", user)
            await stream.on_next_batch(
                [{"user": user, "page": f"/p{i % 3}", "ts": BASE + i * DAY // 4}
                 for i in range(10)]
            )
        await wait_landed(silo.landed, 20)  # type: ignore[attr-defined]

    rows = read_dataset(tmp_path / "lake")
    assert len(rows) == 20
    assert sorted((r["user"], r["_seq"], r["_idx"]) for r in rows) == sorted(
        {(r["user"], r["_seq"], r["_idx"]) for r in rows}
    )
    for r in rows:
        assert r["_date"] == dt.datetime.fromtimestamp(r["ts"] / 1000, dt.UTC).date().isoformat()
        assert r["_stream"] == r["user"]
    assert {r["_date"] for r in rows} == {"2024-03-01", "2024-03-02", "2024-03-03"}
    assert not list((tmp_path / "lake").rglob(".*"))  # no temporary files left


def test_sink_writer_runs_of_one_hour_become_one_file_each(tmp_path: Path) -> None:
    writer = ParquetSinkWriter(tmp_path, ParquetSinkOptions(timestamp_field="ts"))
    events = [({"ts": BASE}, (1, 0)), ({"ts": BASE + 1}, (1, 1)),
              ({"ts": BASE + DAY}, (2, 0)), ({"ts": BASE + HOUR}, (3, 0)),
              ({"ts": BASE + HOUR + 1}, (3, 1)), ({"ts": BASE}, (4, 0))]

    files = writer.write("s-1", "k", events)

    assert [str(Path(f).parent.relative_to(tmp_path)) for f in files] == [
        "date=2024-03-01/hour=00", "date=2024-03-02/hour=00", "date=2024-03-01/hour=01",
        "date=2024-03-01/hour=00"]
    assert [Path(f).name for f in files] == [
        "s-1__1.0-1.1.parquet", "s-1__2.0-2.0.parquet", "s-1__3.0-3.1.parquet",
        "s-1__4.0-4.0.parquet"]
    assert writer.watermark("s-1") == (4, 0)
    assert writer.watermark("other") is None


def test_sink_writer_date_partitions(tmp_path: Path) -> None:
    writer = ParquetSinkWriter(tmp_path, ParquetSinkOptions(partition="date"))
    files = writer.write("s-1", "k", [({"ts": BASE}, (1, 0)), ({"ts": BASE + HOUR}, (1, 1))])

    assert [str(Path(f).relative_to(tmp_path)) for f in files] == [
        "date=2024-03-01/s-1__1.0-1.1.parquet"]


def test_sink_writer_watermark_removes_a_crashed_write(tmp_path: Path) -> None:
    writer = ParquetSinkWriter(tmp_path, ParquetSinkOptions())
    writer.write("s-1", "k", [({"ts": BASE}, (5, 0))])
    torn = tmp_path / "date=2024-03-01" / "hour=00" / ".s-1__6.0-9.0.parquet.tmp-dead"
    torn.write_bytes(b"PAR1 half a file")

    assert writer.watermark("s-1") == (5, 0)
    assert not torn.exists()


async def test_sink_skips_redelivered_events_after_reactivation(tmp_path: Path) -> None:
    silo = Silo(SiloOptions(gateway_port=None, data_dir=str(tmp_path)), grains=[ClickSink])
    silo.landed = Landed()  # type: ignore[attr-defined]
    batch = [({"ts": BASE, "n": i}, SequenceToken(10 + i)) for i in range(5)]
    async with silo:
        sink = silo.get_grain(ClickSink, "u")
        await sink.write_events("clicks", "u", batch[:3])
    silo = Silo(SiloOptions(gateway_port=None, data_dir=str(tmp_path)), grains=[ClickSink])
    silo.landed = Landed()  # type: ignore[attr-defined]
    async with silo:  # a new activation: the watermark comes from the file names
        sink = silo.get_grain(ClickSink, "u")
        files = await sink.write_events("clicks", "u", batch)  # 3 redelivered + 2 new
        stats = await sink.sink_statistics()

    assert len(files) == 1
    assert stats.duplicates_skipped == 3 and stats.events == 2
    assert sorted(r["n"] for r in read_dataset(tmp_path / "lake")) == [0, 1, 2, 3, 4]


def test_sink_stream_slug_is_stable_and_distinct() -> None:
    assert stream_slug("ns", "a/b") == stream_slug("ns", "a/b")
    assert stream_slug("ns", "a/b") != stream_slug("ns", "a_b")
    assert stream_slug("ns", 1) != stream_slug("ns", "1")


# -- kill -9 of a real silo -------------------------------------------------------------------
STREAMS = 8
PER_STREAM = 1000
QUEUES = 4


def event(k: int, n: int) -> dict[str, int]:
    return {"k": k, "n": n, "ts": BASE + n * DAY // 100}  # three dates per stream


async def publish(data_dir: Path, numbers: range) -> None:
    """Another process's producer: enqueue straight into the durable queue file."""
    adapter = SqliteAdapterFactory(str(data_dir / "streams.db")).create_adapter("s")
    mapper = HashRingQueueMapper(QUEUES, "s")
    await adapter.open()
    try:
        for key in range(STREAMS):
            sid = StreamId("numbers", key)
            for start in range(numbers.start, numbers.stop, 10):  # 10 events a container
                chunk = [event(key, n) for n in range(start, min(start + 10, numbers.stop))]
                await adapter.enqueue(mapper.queue_for(sid), sid, chunk)
    finally:
        await adapter.close()


async def unacknowledged(data_dir: Path) -> set[tuple[int, int]]:
    """The events still in the durable queue (read without acknowledging)."""
    adapter = SqliteAdapterFactory(str(data_dir / "streams.db")).create_adapter("s")
    mapper = HashRingQueueMapper(QUEUES, "s")
    await adapter.open()
    found: set[tuple[int, int]] = set()
    try:
        for queue in mapper.all_queues():
            receiver = adapter.create_receiver(queue)
            await receiver.initialize()
            while batch := await receiver.get_messages(1000):
                for container in batch:
                    for pair in container.items():  # (event, token)
                        found.add((pair[0]["k"], pair[0]["n"]))
            await receiver.shutdown()
    finally:
        await adapter.close()
    return found


@pytest.mark.integration
async def test_sink_kill_9_keeps_exactly_the_acknowledged_events(
    silo_launcher: SiloLauncher, tmp_path: Path
) -> None:
    data_dir = silo_launcher.data_dir
    lake = data_dir / "lake"
    config = tmp_path / "sink.toml"
    config.write_text(
        f'[streams.s]\nadapter = "sqlite:streams.db"\ntotal_queues = {QUEUES}\n'
        'pull_period = 0.02\nbatch_size = 16\ncache_size = 400\n'
    )
    args = ("--app", "tests.spark.sink_app", "--config", str(config))
    half = PER_STREAM // 2
    await publish(data_dir, range(half))
    silo = await silo_launcher.start(*args)

    async def landed() -> list[dict[str, Any]]:
        return await asyncio.to_thread(read_dataset, lake)

    async def files() -> int:
        return len(list(lake.glob("date=*/hour=*/*.parquet")))

    await poll_until(files, lambda n: n >= 60, timeout=WAIT, interval=0.02)
    await silo.kill()  # kill -9 while deliveries are being committed

    rows = await landed()  # every visible file reads whole
    in_files = [(r["k"], r["n"]) for r in rows]
    pending = await unacknowledged(data_dir)
    published = {(k, n) for k in range(STREAMS) for n in range(half)}
    acknowledged = published - pending
    assert len(in_files) == len(set(in_files))  # one delivery each so far
    assert acknowledged <= set(in_files)  # nothing acknowledged is missing
    assert set(in_files) <= published
    assert set(in_files) - acknowledged  # committed, not yet acknowledged: will come again

    await publish(data_dir, range(half, PER_STREAM))
    silo = await silo_launcher.start(*args)
    everything = {(k, n) for k in range(STREAMS) for n in range(PER_STREAM)}
    rows = await poll_until(landed, lambda rows: len(rows) >= len(everything), timeout=WAIT)
    await silo.terminate()

    rows = await landed()
    keys = [(r["k"], r["n"]) for r in rows]
    assert sorted(keys) == sorted(everything)  # exactly once: redeliveries were skipped
    for r in rows:
        assert r["_date"] == dt.datetime.fromtimestamp(r["ts"] / 1000, dt.UTC).date().isoformat()
    assert not list(lake.rglob(".*"))  # the crash's temporary files were removed
