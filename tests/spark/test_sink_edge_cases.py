"""ParquetSink edge cases: a crashed write is removed without dedupe, a commit makes new
folders durable, an event with an impossible timestamp is dated by its arrival."""

from __future__ import annotations

from pathlib import Path

import pytest

from orleanspy import Silo, SiloOptions
from orleanspy.spark import ParquetSink, ParquetSinkOptions, ParquetSinkWriter
from orleanspy.spark import sink as sink_module
from orleanspy.spark.sink import stream_slug
from orleanspy.streams import implicit_subscription
from orleanspy.streams.tokens import SequenceToken

pa = pytest.importorskip("pyarrow")

BASE_MS = 1_709_251_200_000  # 2024-03-01T00:00:00Z


@implicit_subscription("edge-clicks")
class NoDedupeSink(ParquetSink):
    sink_options = ParquetSinkOptions(path="lake", timestamp_field="ts", dedupe=False)


async def test_sink_without_dedupe_still_removes_a_crashed_write(tmp_path: Path) -> None:
    # Temporary files left by a crash are deleted when the stream is next written (as the
    # docs say), also when dedupe is off.
    torn = tmp_path / "lake" / "date=2024-03-01" / "hour=00" / (
        f".{stream_slug('edge-clicks', 'u')}__6.0-9.0.parquet.tmp-dead")
    torn.parent.mkdir(parents=True)
    torn.write_bytes(b"PAR1 half a file")
    silo = Silo(SiloOptions(gateway_port=None, data_dir=str(tmp_path)), grains=[NoDedupeSink])
    async with silo:
        sink = silo.get_grain(NoDedupeSink, "u")
        files = await sink.write_events("edge-clicks", "u",
                                        [({"ts": BASE_MS}, SequenceToken(10))])

    assert len(files) == 1
    assert not torn.exists()


def test_sink_commit_makes_new_folders_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A new dataset root (and its parents) is a new directory entry too: unless the folder
    # holding it is fsynced, a power loss can drop the whole folder of committed (and
    # acknowledged) files.
    synced: list[Path] = []
    real = sink_module._fsync_dir

    def record(path: Path) -> None:
        synced.append(Path(path))
        real(path)

    monkeypatch.setattr(sink_module, "_fsync_dir", record)
    root = tmp_path / "lake" / "pageviews"
    writer = ParquetSinkWriter(root, ParquetSinkOptions())

    writer.write("s-1", "k", [({"ts": BASE_MS}, (1, 0))])

    for folder in (tmp_path, tmp_path / "lake", root, root / "date=2024-03-01",
                   root / "date=2024-03-01" / "hour=00"):
        assert folder in synced, (folder, synced)


def test_sink_event_with_an_impossible_timestamp_is_dated_by_arrival(tmp_path: Path) -> None:
    # An event with a NaN or out-of-range timestamp must not fail the whole delivery (again
    # on every retry, until the failure policy drops the good events with it): it is dated
    # by its arrival, like one without a time.
    writer = ParquetSinkWriter(tmp_path, ParquetSinkOptions(timestamp_field="ts"))
    arrival = BASE_MS / 1000
    for n, ts in enumerate((float("nan"), float("inf"), 10**17, -(10**17))):
        files = writer.write(f"s-{n}", "k", [({"ts": ts}, (1, 0))], arrival=arrival)

        assert [Path(f).parent.parent.name for f in files] == ["date=2024-03-01"], ts
