"""Lake compaction: the small files of closed partitions merged into files of a target size,
online (the sink keeps writing) and crash-safe (every row visible exactly once, always).

One partition (a ``date=*/hour=*`` folder, or ``date=*``) is compacted at a time:

1. Staging: a hidden sibling folder ``.<partition>.compact-<id>`` receives the merged files
   (``part-<id>-<n>.parquet``), a hard link to every file of the partition that is not merged,
   and the marker ``_compacted-<id>.msgpack`` naming the partition's files it replaces
   (``inputs``) and, per stream, the newest token merged away (``watermarks``); all fsynced.
2. Commit: the staging folder and the partition are exchanged in one atomic rename
   (``renameat2(RENAME_EXCHANGE)``). A reader lists either the old folder or the new one,
   never both and never neither.
3. Rescue: a file the sink committed into the old folder after step 1 listed it (a late
   event) is not among ``inputs``: it is moved into the new folder.
4. Clean-up: the old folder (now at the staging name) is deleted.

A crash (even kill -9) between any two steps leaves the partition's visible folder whole; the
next run's ``recover`` finishes the job: a staging folder whose marker is in the visible
partition was committed (rescue, then delete it), any other was not (delete it). One
compactor per dataset at a time: an exclusive ``flock`` on ``<dataset>/.compact.lock`` (a
second one skips the dataset).

The exchange needs a local filesystem that supports it (ext4, xfs, btrfs, tmpfs); elsewhere
``compact`` raises ``OSError`` without touching the partition.
"""

from __future__ import annotations

import ctypes
import datetime as _dt
import errno
import fcntl
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack

from orleanspy.errors import ConfigurationError
from orleanspy.logging import get_logger
from orleanspy.spark.lake import MARKER_PREFIX, partitions, read_marker, sink_token_range

__all__ = ["CompactionOptions", "CompactionResult", "compact", "recover"]

_log = get_logger(__name__)
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
_STAGING = ".compact-"
# errors that fail every partition alike: raised, not counted per partition
_FATAL = frozenset({errno.ENOSYS, errno.EINVAL, errno.EXDEV, errno.ENOSPC, errno.EROFS})

StepHook = Callable[[str, Path], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionOptions:
    """What ``compact`` merges.

    Attributes:
        target_size: bytes a merged file aims at (the inputs of one merged file add up to
            at most this; default 128 MiB).
        small_fraction: a file smaller than ``target_size * small_fraction`` is small
            (merged); larger files are left as they are.
        grace: seconds after a partition's end before it counts as closed (late events
            still land in a closed partition; compaction takes them in on its next run).
    """

    target_size: int = 128 * 1024 * 1024
    small_fraction: float = 0.5
    grace: float = 3600.0

    def __post_init__(self) -> None:
        if not isinstance(self.target_size, int) or self.target_size < 1024:
            raise ConfigurationError(
                f"CompactionOptions.target_size = {self.target_size!r}: must be >= 1024 bytes")
        if not 0 < self.small_fraction <= 1:
            raise ConfigurationError(
                f"CompactionOptions.small_fraction = {self.small_fraction!r}: must be in (0, 1]")
        if self.grace < 0:
            raise ConfigurationError(
                f"CompactionOptions.grace = {self.grace!r}: must be >= 0 seconds")


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """What one ``compact`` run did."""

    partitions: int  # partitions compacted
    files_before: int  # visible Parquet files of those partitions before
    files_after: int  # and after
    recovered: int  # interrupted compactions finished or undone first
    skipped_locked: bool = False  # another compactor held the dataset
    failed: int = 0  # partitions left as they were after an error (logged)


def compact(
    root: str | os.PathLike[str],
    options: CompactionOptions | None = None,
    *,
    now: float | None = None,
    on_step: StepHook | None = None,
) -> CompactionResult:
    """Compact the closed partitions of one dataset (blocking: run it in a thread).

    Args:
        root: the dataset folder (a sink's ``path`` under the lake).
        options: sizes and grace period.
        now: the current time (epoch seconds) deciding which partitions are closed.
        on_step: called with ``(step, partition)`` after ``staged``, ``exchanged`` and
            ``cleaned`` (progress, and the crash tests' stopping points).
    """
    opts = options or CompactionOptions()
    folder = Path(root)
    current = _dt.datetime.now(_dt.UTC).timestamp() if now is None else now
    if not folder.is_dir():
        return CompactionResult(0, 0, 0, 0)
    with _locked(folder) as held:
        if not held:
            _log.info("lake_compaction_skipped_locked", dataset=str(folder))
            return CompactionResult(0, 0, 0, 0, skipped_locked=True)
        recovered = recover(folder)
        done = before = after = failed = 0
        for part in list(partitions(folder)):
            end = _partition_end(part)
            if end is None or end + opts.grace > current:
                continue
            try:
                counts = _compact_partition(part, opts, on_step)
            except Exception as exc:  # e.g. files whose schemas cannot be merged
                if isinstance(exc, OSError) and exc.errno in _FATAL:
                    raise
                _log.warning("lake_partition_not_compacted", partition=str(part),
                             error=repr(exc))
                failed += 1
                continue
            if counts is not None:
                done += 1
                before += counts[0]
                after += counts[1]
    _log.info("lake_compacted", dataset=str(folder), partitions=done, files_before=before,
              files_after=after, recovered=recovered, failed=failed)
    return CompactionResult(done, before, after, recovered, failed=failed)


def recover(root: Path) -> int:
    """Finish or undo the compactions a crash interrupted (call it holding the lock)."""
    count = 0
    for parent in [root, *(p for p in root.iterdir() if p.name.startswith("date="))]:
        if not parent.is_dir():
            continue
        for staging in list(parent.iterdir()):
            name, sep, op_id = staging.name.rpartition(_STAGING)
            if not sep or not name.startswith(".") or not staging.is_dir():
                continue
            visible = parent / name[1:]
            marker = visible / f"{MARKER_PREFIX}{op_id}.msgpack"
            if marker.exists():  # committed: the staging folder holds the old files
                _rescue(staging, visible, set(read_marker(marker)["inputs"]))
            shutil.rmtree(staging)
            _fsync_dir(parent)
            _log.info("lake_compaction_recovered", partition=str(visible),
                      committed=marker.exists())
            count += 1
    return count


def _compact_partition(
    part: Path, opts: CompactionOptions, on_step: StepHook | None,
) -> tuple[int, int] | None:
    entries = [p for p in part.iterdir() if not p.name.startswith(".")]
    files = sorted(p for p in entries if p.name.endswith(".parquet") and p.is_file())
    markers = [p for p in entries if p.name.startswith(MARKER_PREFIX)]
    small_limit = opts.target_size * opts.small_fraction
    small = [(p, p.stat().st_size) for p in files if p.stat().st_size < small_limit]
    bins = _bins(small, opts.target_size)
    if not bins:
        return None
    merged = {p for group in bins for p in group}
    op_id = uuid.uuid4().hex[:12]
    staging = part.parent / f".{part.name}{_STAGING}{op_id}"
    staging.mkdir()
    try:
        marker = _stage(staging, op_id, files, merged, markers, bins, entries)
    except Exception:  # nothing visible changed: drop the staging folder, keep the files
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _step(on_step, "staged", part)
    _exchange(staging, part)
    _fsync_dir(part.parent)
    _step(on_step, "exchanged", part)
    _rescue(staging, part, set(marker["inputs"]))
    shutil.rmtree(staging)
    _fsync_dir(part.parent)
    _step(on_step, "cleaned", part)
    after = len(files) - len(merged) + len(marker["outputs"])
    _log.info("lake_partition_compacted", partition=str(part), files_before=len(files),
              files_after=after)
    return len(files), after


def _stage(
    staging: Path, op_id: str, files: list[Path], merged: set[Path],
    markers: list[Path], bins: list[list[Path]], entries: list[Path],
) -> dict[str, Any]:
    """Step 1: the partition's next content in ``staging``, with its marker; returns it."""
    watermarks: dict[str, list[int]] = {}
    for old in markers:
        for slug, token in read_marker(old).get("watermarks", {}).items():
            _newest(watermarks, slug, (int(token[0]), int(token[1])))
    for path in merged:
        parsed = sink_token_range(path.name)
        if parsed is not None:
            _newest(watermarks, parsed[0], parsed[2])
    outputs = []
    for n, group in enumerate(bins):
        out = staging / f"part-{op_id}-{n:04d}.parquet"
        _merge(group, out)
        outputs.append(out.name)
    for path in files:
        if path not in merged:
            os.link(path, staging / path.name)
    marker: dict[str, Any] = {"id": op_id, "inputs": sorted(p.name for p in entries),
                              "outputs": outputs, "watermarks": watermarks}
    _write_durable(staging / f"{MARKER_PREFIX}{op_id}.msgpack",
                   msgpack.packb(marker, use_bin_type=True))
    _fsync_dir(staging)
    return marker


def _bins(small: list[tuple[Path, int]], target: int) -> list[list[Path]]:
    """Groups of consecutive small files whose sizes add up to at most ``target``; groups
    of one file are left out (nothing to merge)."""
    groups: list[list[Path]] = []
    current: list[Path] = []
    size = 0
    for path, n in small:
        if current and size + n > target:
            groups.append(current)
            current, size = [], 0
        current.append(path)
        size += n
    if current:
        groups.append(current)
    return [g for g in groups if len(g) > 1]


def _merge(group: list[Path], out: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = [pq.read_table(p) for p in group]
    table = pa.concat_tables(tables, promote_options="permissive")
    with open(out, "wb") as f:
        pq.write_table(table, f, compression="snappy")
        f.flush()
        os.fsync(f.fileno())


def _rescue(old: Path, visible: Path, inputs: set[str]) -> None:
    """Move the files committed into ``old`` after it was listed into ``visible``."""
    for path in old.iterdir():
        name = path.name
        if name in inputs or name.startswith((".", "_")) or not name.endswith(".parquet"):
            continue
        if not (visible / name).exists():
            os.rename(path, visible / name)
            _log.info("lake_compaction_rescued", file=str(visible / name))
    _fsync_dir(visible)


def _newest(marks: dict[str, list[int]], slug: str, token: tuple[int, int]) -> None:
    old = marks.get(slug)
    if old is None or token > (old[0], old[1]):
        marks[slug] = [token[0], token[1]]


def _partition_end(part: Path) -> float | None:
    """The end of a partition's hour (or day), epoch seconds; None for an unknown name."""
    try:
        if part.name.startswith("hour="):
            day = _dt.date.fromisoformat(part.parent.name.removeprefix("date="))
            hour = int(part.name.removeprefix("hour="))
            start = _dt.datetime(day.year, day.month, day.day, hour, tzinfo=_dt.UTC)
            return (start + _dt.timedelta(hours=1)).timestamp()
        day = _dt.date.fromisoformat(part.name.removeprefix("date="))
    except ValueError:
        return None
    if any(p.name.startswith("hour=") for p in part.iterdir()):
        return None  # an hour-partitioned day: its hours are compacted one by one
    start = _dt.datetime(day.year, day.month, day.day, tzinfo=_dt.UTC)
    return (start + _dt.timedelta(days=1)).timestamp()


def _exchange(a: Path, b: Path) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2: Any = getattr(libc, "renameat2", None)
    if renameat2 is None:
        raise OSError(errno.ENOSYS, "lake compaction needs renameat2 (Linux, glibc >= 2.28)")
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        shutil.rmtree(a, ignore_errors=True)
        raise OSError(err, f"lake compaction: atomic exchange of {b} failed "
                      f"({os.strerror(err)}); the lake's filesystem must support "
                      "RENAME_EXCHANGE (ext4, xfs, btrfs, tmpfs)")


def _write_durable(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _step(hook: StepHook | None, step: str, part: Path) -> None:
    if hook is not None:
        hook(step, part)


@contextmanager
def _locked(folder: Path) -> Iterator[bool]:
    fd = os.open(folder / ".compact.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)
