"""Lake compaction: small files of closed partitions merged, every row exactly once (also
across a kill -9 of the compacting process and while the sink writes), the sink's watermark
kept; and the lake's configuration (a relative lake is refused in a cluster)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from orleanspy import ConfigurationError, Silo, SiloOptions
from orleanspy.spark import ParquetSink, ParquetSinkOptions, ParquetSinkWriter, SparkOptions
from orleanspy.spark.compaction import CompactionOptions, compact
from orleanspy.streams.tokens import SequenceToken
from silo.config import load_config

pq = pytest.importorskip("pyarrow.parquet")
ds = pytest.importorskip("pyarrow.dataset")

REPO = Path(__file__).resolve().parents[2]
HOUR_MS = 3_600_000
BASE_MS = 1_709_251_200_000  # 2024-03-01T00:00:00Z: long closed
SMALL = CompactionOptions(target_size=1 << 20, grace=0)
WAIT = 60.0


def land(root: Path, streams: int, deliveries: int, per_delivery: int) -> set[tuple[str, int]]:
    """Write sink files as deliveries of ``per_delivery`` events over two hours; returns the
    (stream, seq) of every event."""
    writer = ParquetSinkWriter(root, ParquetSinkOptions(fsync=False))
    expected: set[tuple[str, int]] = set()
    for s in range(streams):
        seq = 0
        for d in range(deliveries):
            events = []
            for _ in range(per_delivery):
                ts = BASE_MS + (d * 2 * HOUR_MS) // deliveries
                events.append(({"n": seq, "ts": ts}, (seq, 0)))
                expected.add((f"k{s}", seq))
                seq += 1
            writer.write(f"s-{s}", f"k{s}", events)
    return expected


def visible_rows(root: Path) -> Counter[tuple[str, int]]:
    """Every visible row, counted (what Spark or pyarrow would read now)."""
    table = ds.dataset(root, format="parquet", partitioning="hive").to_table(
        columns=["_stream", "_seq"])
    return Counter(zip(table.column("_stream").to_pylist(), table.column("_seq").to_pylist(),
                       strict=True))


def parquet_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*.parquet") if not any(
        part.startswith(".") for part in p.relative_to(root).parts)]


def test_compaction_merges_small_files_and_keeps_every_row_once(tmp_path: Path) -> None:
    root = tmp_path / "clicks"
    expected = land(root, streams=3, deliveries=40, per_delivery=20)
    writer = ParquetSinkWriter(root, ParquetSinkOptions())
    marks = {s: writer.watermark(f"s-{s}") for s in range(3)}
    assert len(parquet_files(root)) == 120

    result = compact(root, SMALL)

    assert (result.partitions, result.files_before, result.files_after) == (2, 120, 2)
    assert len(parquet_files(root)) == 2
    assert visible_rows(root) == Counter(expected)
    assert {s: writer.watermark(f"s-{s}") for s in range(3)} == marks
    again = compact(root, SMALL)  # nothing small left to merge
    assert (again.partitions, len(parquet_files(root))) == (0, 2)
    assert not [p for p in root.rglob(".*") if p.name != ".compact.lock"]


def test_compaction_leaves_open_partitions_alone(tmp_path: Path) -> None:
    root = tmp_path / "clicks"
    land(root, streams=1, deliveries=10, per_delivery=5)
    now = BASE_MS / 1000 + 2 * 3600 + 600  # ten minutes after the second hour ended

    result = compact(root, CompactionOptions(target_size=1 << 20, grace=3600), now=now)

    assert result.partitions == 1  # the first hour: closed an hour and ten minutes ago
    assert len(parquet_files(root)) == 1 + 5


@pytest.mark.parametrize("step", ["staged", "exchanged"])
async def test_kill_9_mid_compaction_leaves_every_row_exactly_once(
    tmp_path: Path, step: str,
) -> None:
    root = tmp_path / "clicks"
    expected = Counter(land(root, streams=2, deliveries=30, per_delivery=20))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.spark.compact_app", str(root), step, cwd=REPO,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(WAIT):
            while True:  # the first partition reaches the step, then the process waits
                line = (await proc.stdout.readline()).decode()
                assert line, "the compaction ended before the step"
                if line.startswith(step):
                    break
        assert visible_rows(root) == expected  # while it is stopped mid-way
        proc.send_signal(signal.SIGKILL)
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()

    assert visible_rows(root) == expected  # after the crash, before any recovery
    writer = ParquetSinkWriter(root, ParquetSinkOptions())
    assert writer.watermark("s-0") == (599, 0) and writer.watermark("s-1") == (599, 0)
    result = compact(root, SMALL)  # recovers, then compacts what is left

    assert result.recovered == 1
    assert visible_rows(root) == expected
    assert len(parquet_files(root)) == 2
    assert not [p for p in root.rglob(".*") if p.name != ".compact.lock"]
    assert writer.watermark("s-0") == (599, 0) and writer.watermark("s-1") == (599, 0)


class LateSink(ParquetSink):
    sink_options = ParquetSinkOptions(path="clicks", timestamp_field="ts")


async def test_sink_keeps_writing_into_a_partition_being_compacted(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    root = lake / "clicks"
    silo = Silo(SiloOptions(gateway_port=None, data_dir=str(tmp_path)), grains=[LateSink],
                spark=SparkOptions(lake=str(lake)))
    expected: Counter[tuple[str, int]] = Counter()
    loop = asyncio.get_running_loop()
    async with silo:
        sink = silo.get_grain(LateSink, "late")
        seq = 0

        async def deliver(n: int) -> None:  # late events: into the closed first hour
            nonlocal seq
            events = []
            for _ in range(n):
                events.append(({"n": seq, "ts": BASE_MS + seq}, SequenceToken(seq)))
                expected[("late", seq)] += 1
                seq += 1
            await sink.write_events("clicks", "late", events)

        for _ in range(30):
            await deliver(10)
        during: list[str] = []

        def on_step(step: str, partition: Path) -> None:  # the compaction's thread
            # a delivery after the partition was listed (its file lands in the old folder,
            # and must be moved over), and one after the exchange (into the new folder)
            asyncio.run_coroutine_threadsafe(deliver(10), loop).result(WAIT)
            during.append(step)

        stop = threading.Event()

        async def keep_writing() -> int:
            count = 0
            while not stop.is_set():
                await deliver(5)
                count += 1
            return count

        writer = asyncio.create_task(keep_writing())
        result = await asyncio.to_thread(compact, root, SMALL, on_step=on_step)
        stop.set()
        background = await asyncio.wait_for(writer, WAIT)
        final = await asyncio.to_thread(compact, root, SMALL)  # takes in the late files

    assert during == ["staged", "exchanged", "cleaned"]
    assert result.partitions == 1 and background >= 1
    assert visible_rows(root) == expected
    assert final.partitions == 1 and len(parquet_files(root)) == 1


def test_relative_lake_in_a_cluster_is_refused(tmp_path: Path) -> None:
    options = SiloOptions(gateway_port=None, data_dir=str(tmp_path),
                          membership=f"sqlite:{tmp_path / 'cluster.db'}")

    with pytest.raises(ConfigurationError, match=r"SparkOptions.lake .* = 'lake'.*absolute path"):
        Silo(options, spark=SparkOptions(lake="lake"))
    Silo(options, spark=SparkOptions(lake=str(tmp_path / "shared")))  # absolute: fine
    Silo(SiloOptions(gateway_port=None, data_dir=str(tmp_path)),
         spark=SparkOptions(lake="lake"))  # a lone silo: under its data_dir


def test_relative_lake_in_a_cluster_config_file_names_the_key(tmp_path: Path) -> None:
    config = tmp_path / "orleanspy.toml"
    config.write_text('membership = "sqlite:cluster.db"\n[spark]\nlake = "lake"\n')

    with pytest.raises(ConfigurationError, match=r"spark\.lake = 'lake'.*\[spark\] lake = "):
        load_config(config)
    config.write_text('membership = "sqlite:cluster.db"\n[spark]\nlake = "/shared/lake"\n')
    assert load_config(config).spark == SparkOptions(lake="/shared/lake")
    config.write_text('[spark]\nlake = 5\n')
    with pytest.raises(ConfigurationError, match=r"SparkOptions\.lake = 5: must be a folder"):
        load_config(config)


def test_sink_lands_under_the_lake(tmp_path: Path) -> None:
    from orleanspy.spark.lake import resolve_dataset

    assert resolve_dataset("clicks", "/shared/lake", "/data") == Path("/shared/lake/clicks")
    assert resolve_dataset("clicks", "lake", "/data") == Path("/data/lake/clicks")
    assert resolve_dataset("clicks", None, "/data") == Path("/data/clicks")
    assert resolve_dataset("/abs/clicks", "/shared/lake", "/data") == Path("/abs/clicks")




def test_cli_lake_compact_takes_the_lake_of_the_config_file(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    expected = land(lake / "clicks", streams=2, deliveries=10, per_delivery=5)
    config = tmp_path / "orleanspy.toml"
    config.write_text(f'[spark]\nlake = "{lake}"\n')

    out = subprocess.run(
        [sys.executable, "-m", "silo", "lake", "compact", "--config", str(config), "--json",
         "--grace", "0"], cwd=REPO, capture_output=True, text=True, timeout=WAIT, check=True,
    )

    report = json.loads(out.stdout)
    assert report["dataset"] == str(lake / "clicks")
    assert (report["files_before"], report["files_after"]) == (20, 2)
    assert visible_rows(lake / "clicks") == Counter(expected)
    missing = subprocess.run([sys.executable, "-m", "silo", "lake", "compact", str(tmp_path / "x")],
                             cwd=REPO, capture_output=True, text=True, timeout=WAIT)
    assert missing.returncode == 2 and "is not a folder" in missing.stderr


def test_a_partition_that_cannot_be_merged_is_left_as_it_was(tmp_path: Path) -> None:
    root = tmp_path / "clicks"
    expected = land(root, streams=1, deliveries=10, per_delivery=5)
    first_hour = root / "date=2024-03-01" / "hour=00"
    (first_hour / "broken.parquet").write_bytes(b"PAR1 not parquet at all")
    before = sorted(p.name for p in first_hour.iterdir())

    result = compact(root, SMALL)

    assert (result.partitions, result.failed) == (1, 1)  # the second hour still merged
    assert sorted(p.name for p in first_hour.iterdir()) == before
    (first_hour / "broken.parquet").unlink()
    assert visible_rows(root) == Counter(expected)
    assert not [p for p in root.rglob(".*") if p.name != ".compact.lock"]


async def test_sink_skips_redelivered_events_after_compaction(tmp_path: Path) -> None:
    # The files holding the stream's tokens are merged away; the marker keeps the watermark,
    # so a fresh activation still skips what was committed.
    lake = tmp_path / "lake"
    options = SiloOptions(gateway_port=None, data_dir=str(tmp_path))

    def events(numbers: range) -> list[tuple[dict[str, int], SequenceToken]]:
        return [({"n": n, "ts": BASE_MS + n}, SequenceToken(n)) for n in numbers]

    async with Silo(options, grains=[LateSink], spark=SparkOptions(lake=str(lake))) as silo:
        for first in range(0, 100, 10):
            await silo.get_grain(LateSink, "s").write_events("clicks", "s",
                                                             events(range(first, first + 10)))
    assert compact(lake / "clicks", SMALL).files_after == 1

    async with Silo(options, grains=[LateSink], spark=SparkOptions(lake=str(lake))) as silo:
        sink = silo.get_grain(LateSink, "s")
        written = await sink.write_events("clicks", "s", events(range(50, 150)))
        stats = await sink.sink_statistics()

    assert len(written) == 1 and stats.duplicates_skipped == 50
    assert visible_rows(lake / "clicks") == Counter(("s", n) for n in range(150))
