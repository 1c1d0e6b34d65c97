"""ParquetSink: a stream consumer grain that lands events as Parquet files, partitioned by date
and hour, under the silo's lake (``SparkOptions.lake``; layout in ``spark/lake.py``).

Where it sits: pulling agent (3) -> one delivery call with up to ``batch_size`` containers
-> ``ParquetSink`` writes them -> the call returns -> the agent advances the subscription's
cursor -> once every gating consumer is past the events, the queue acknowledges them.

Commit protocol (why a crash neither loses events nor leaves half files):

1. A delivery's events are split into runs of consecutive events of the same hour; each run
   becomes one file ``<path>/date=YYYY-MM-DD/hour=HH/<stream>__<first>-<last>.parquet``,
   where ``first``/``last`` are the run's sequence tokens.
2. Each file is written under a hidden temporary name (``.<name>.tmp-<id>``; Spark and
   pyarrow skip names starting with ``.``), flushed and fsynced, then renamed to its final
   name (atomic on POSIX), and the folder is fsynced. A reader sees a file complete or not
   at all.
3. Only when every file of the delivery is renamed does the delivery call return, so the
   stream acknowledges an event only after its file is committed (at least once).
4. After a crash, the events that were committed but not yet acknowledged come again. Files
   are committed in token order, so the newest token in a stream's file names is a
   watermark: everything up to it is on disk (a compaction's marker keeps it for the files
   it merged). Redelivered events at or below it are skipped (``dedupe``), so the dataset
   holds each event exactly once. Temporary files left by the crash are deleted when the
   stream is next written.

A delivery whose write fails raises: the agent retries it (the same events, the same file
names) until the provider's ``max_delivery_time``; after that the provider's failure policy
applies (``skip`` would acknowledge events that are not on disk: give the sink's provider a
long ``max_delivery_time``).
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import hashlib
import os
import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from orleanspy.grains.grain import Grain
from orleanspy.grains.interface import read_only, stream_handler
from orleanspy.grains.request_context import unwrap_events
from orleanspy.logging import get_logger
from orleanspy.messaging.context_event import ContextEvent
from orleanspy.spark.errors import SparkUnavailableError
from orleanspy.spark.lake import Token, remove_leftovers, resolve_dataset, watermark
from orleanspy.spark.options import ParquetSinkOptions
from orleanspy.spark.session import installed_spark

__all__ = ["ParquetSink", "ParquetSinkWriter", "SinkStatistics"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_COMMIT_ATTEMPTS = 3
_log = get_logger(__name__)


def _pyarrow() -> tuple[Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise SparkUnavailableError(
            f"pyarrow is not installed ({exc}); install the Spark extra: "
            "pip install 'orleanspy[spark]'"
        ) from None
    return pa, pq


@dataclass(frozen=True, slots=True)
class SinkStatistics:
    """What one sink activation wrote."""

    files: int
    events: int
    duplicates_skipped: int
    streams: int


def stream_slug(namespace: str, key: Any) -> str:
    """A file-name-safe, collision-free name of a stream (readable part + stable hash)."""
    text = f"{namespace}/{key!s}"
    digest = hashlib.blake2b(f"{type(key).__name__}:{text}".encode(), digest_size=5).hexdigest()
    readable = _UNSAFE.sub("_", f"{namespace}.{key!s}")[:80]
    return f"{readable}-{digest}"


class ParquetSinkWriter:
    """Blocking writer of one dataset (call it from a thread): commits files, finds the
    watermark of a stream, removes a crash's leftovers."""

    def __init__(self, root: str | os.PathLike[str], options: ParquetSinkOptions) -> None:
        self.root = Path(root)
        self.options = options
        self._schema: Any = None
        if options.columns is not None:
            pa, _ = _pyarrow()
            fields = [(name, pa.type_for_alias(type_name))
                      for name, type_name in options.columns.items()]
            if options.metadata_columns:
                fields += [("_stream", pa.string()), ("_seq", pa.int64()), ("_idx", pa.int64())]
            self._schema = pa.schema(fields)

    # -- recovery -------------------------------------------------------------------------
    def watermark(self, slug: str) -> Token | None:
        """The newest token committed for a stream (and delete its temporary files: call it
        before a stream's first write, with or without ``dedupe``)."""
        remove_leftovers(self.root, slug)
        return watermark(self.root, slug)

    # -- writing --------------------------------------------------------------------------
    def write(
        self, slug: str, stream_key: str, events: Sequence[tuple[Any, Token]],
        arrival: float | None = None,
    ) -> list[str]:
        """Commit ``events`` (in token order) as one file per run of one partition; returns
        the committed paths, in order."""
        arrival = time.time() if arrival is None else arrival
        runs: list[tuple[str, list[tuple[Any, Token]]]] = []
        for item, token in events:
            folder = self._partition_of(item, arrival)
            if runs and runs[-1][0] == folder:
                runs[-1][1].append((item, token))
            else:
                runs.append((folder, [(item, token)]))
        return [self._commit(slug, stream_key, folder, run) for folder, run in runs]

    def _partition_of(self, item: Any, arrival: float) -> str:
        """The partition folder of an event: ``date=YYYY-MM-DD[/hour=HH]`` (UTC)."""
        field = self.options.timestamp_field
        value = item.get(field) if field and isinstance(item, dict) else None
        when: _dt.datetime
        if isinstance(value, bool) or value is None:
            when = _dt.datetime.fromtimestamp(arrival, _dt.UTC)
        elif isinstance(value, (int, float)):
            seconds = value / 1000 if self.options.timestamp_unit == "ms" else value
            try:
                when = _dt.datetime.fromtimestamp(seconds, _dt.UTC)
            except (ValueError, OverflowError, OSError):  # NaN, inf, out of range
                when = _dt.datetime.fromtimestamp(arrival, _dt.UTC)
        elif isinstance(value, _dt.datetime):
            when = value if value.tzinfo else value.replace(tzinfo=_dt.UTC)
        elif isinstance(value, str):
            try:
                when = _dt.datetime.fromisoformat(value)
            except ValueError:
                when = _dt.datetime.fromtimestamp(arrival, _dt.UTC)
        else:
            when = _dt.datetime.fromtimestamp(arrival, _dt.UTC)
        if when.tzinfo is not None:
            when = when.astimezone(_dt.UTC)
        if self.options.partition == "hour":
            return f"date={when.date().isoformat()}/hour={when.hour:02d}"
        return f"date={when.date().isoformat()}"

    def _table(self, stream_key: str, run: list[tuple[Any, Token]]) -> Any:
        pa, _ = _pyarrow()
        rows = []
        for item, (seq, idx) in run:
            row = dict(item) if isinstance(item, dict) else {"value": item}
            if self.options.metadata_columns:
                row["_stream"] = stream_key
                row["_seq"] = seq
                row["_idx"] = idx
            rows.append(row)
        if self._schema is not None:
            return pa.Table.from_pylist(rows, schema=self._schema)
        return pa.Table.from_pylist(rows)

    def _commit(self, slug: str, stream_key: str, partition: str,
                run: list[tuple[Any, Token]]) -> str:
        first, last = run[0][1], run[-1][1]
        folder = self.root / partition
        name = f"{slug}__{first[0]}.{first[1]}-{last[0]}.{last[1]}.parquet"
        table = self._table(stream_key, run)
        for attempt in range(_COMMIT_ATTEMPTS):
            try:
                return self._write_file(folder, name, table)
            except FileNotFoundError:
                # A compaction swapped the partition folder between this file's temporary
                # write and its rename: write it again into the folder now in place.
                if attempt == _COMMIT_ATTEMPTS - 1:
                    raise
                _log.info("parquet_sink_commit_retried", folder=str(folder), file=name)
        raise AssertionError("unreachable")

    def _write_file(self, folder: Path, name: str, table: Any) -> str:
        _, pq = _pyarrow()
        _make_dirs(folder, self.options.fsync)
        final = folder / name
        tmp = folder / f".{name}.tmp-{uuid.uuid4().hex[:8]}"
        try:
            with open(tmp, "wb") as f:
                pq.write_table(table, f, compression=self.options.compression)
                f.flush()
                if self.options.fsync:
                    os.fsync(f.fileno())
            os.replace(tmp, final)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        if self.options.fsync:
            _fsync_dir(folder)
        return str(final)


def _make_dirs(folder: Path, fsync: bool) -> None:
    """``mkdir -p``; each folder it creates is made durable in its parent (``fsync``)."""
    missing: list[Path] = []
    path = folder
    while not path.exists():
        missing.append(path)
        path = path.parent
    for path in reversed(missing):
        path.mkdir(exist_ok=True)
        if fsync:
            _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ParquetSink(Grain):
    """Base class of a stream consumer that lands its events as Parquet.

    Subclass it, set ``sink_options`` and subscribe it, usually implicitly::

        @implicit_subscription("pageviews")
        class PageViewSink(ParquetSink):
            sink_options = ParquetSinkOptions(path="pageviews", timestamp_field="ts")

    Give its stream provider a large ``batch_size`` (e.g. 512): each delivery call becomes
    one file per hour, committed (written, fsynced, renamed) before the call returns, so the
    stream acknowledges events only once they are on disk. Events are dicts (one column per
    key) or any other value (one ``value`` column). Override ``on_commit`` to react to
    committed files (e.g. count them).
    """

    sink_options: ClassVar[ParquetSinkOptions] = ParquetSinkOptions()

    def _sink(self) -> ParquetSinkWriter:
        writer: ParquetSinkWriter | None = self.__dict__.get("_orleanspy_sink_writer")
        if writer is None:
            manager = installed_spark(self.silo)
            lake = None if manager is None else manager.options.lake
            root = resolve_dataset(self.sink_options.path, lake, self.silo.options.data_dir)
            writer = ParquetSinkWriter(root, self.sink_options)
            self.__dict__["_orleanspy_sink_writer"] = writer
            self.__dict__["_orleanspy_sink_marks"] = {}
            self.__dict__["_orleanspy_sink_stats"] = [0, 0, 0]
        return writer

    async def __orleanspy_stream_deliver__(
        self, sub_id: str, namespace: str, key: Any, events: list[Any],
        handshake: str | None = None,
    ) -> None:
        """Runtime extension: one delivery (a batch of ``(event, token)``) -> committed files."""
        if any(type(item) is ContextEvent for item, _ in events):
            events = unwrap_events(events)[0]  # the rows are the events, not their context
        await self.write_events(namespace, key, events)

    async def on_next(self, item: Any, token: Any) -> None:
        """One event (for explicit ``subscribe(self.on_next)`` use: one file per event;
        implicit subscriptions get whole batches)."""
        raise NotImplementedError(
            "ParquetSink receives whole deliveries; subscribe the grain itself, e.g. "
            "stream.subscribe(self), or call write_events"
        )

    @stream_handler
    async def write_events(self, namespace: str, key: Any, events: Sequence[Any]) -> list[str]:
        """Commit ``(event, token)`` pairs of one stream; returns the committed paths. A
        stream handler: the grain's own code and the silo may call it, clients may not.

        Events at or below the stream's committed watermark are skipped (``dedupe``).
        """
        writer = self._sink()
        marks: dict[str, Token | None] = self.__dict__["_orleanspy_sink_marks"]
        stats: list[int] = self.__dict__["_orleanspy_sink_stats"]
        slug = stream_slug(namespace, key)
        if slug not in marks:  # the first write: a crash's temporary files go either way
            mark_on_disk = await asyncio.to_thread(writer.watermark, slug)
            marks[slug] = mark_on_disk if self.sink_options.dedupe else None
        mark = marks[slug]
        fresh: list[tuple[Any, Token]] = []
        for item, token in events:
            tok = (int(token.sequence), int(token.index))
            if mark is not None and tok <= mark:
                stats[2] += 1
                continue
            fresh.append((item, tok))
        if not fresh:
            return []
        files = await asyncio.to_thread(writer.write, slug, str(key), fresh,
                                        self.silo.clock.time())
        marks[slug] = fresh[-1][1]
        stats[0] += len(files)
        stats[1] += len(fresh)
        await self.on_commit(files, len(fresh))
        return files

    @stream_handler
    async def on_commit(self, files: list[str], events: int) -> None:
        """Called after ``files`` (holding ``events`` events) are committed, before the
        delivery is acknowledged. Override to react; exceptions fail the delivery."""

    @read_only
    async def sink_statistics(self) -> SinkStatistics:
        self._sink()
        stats: list[int] = self.__dict__["_orleanspy_sink_stats"]
        marks: dict[str, Any] = self.__dict__["_orleanspy_sink_marks"]
        return SinkStatistics(files=stats[0], events=stats[1], duplicates_skipped=stats[2],
                              streams=len(marks))
