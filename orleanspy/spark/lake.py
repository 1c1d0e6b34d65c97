"""The lake's layout: where a sink's files go, how their names carry stream tokens, and the
newest token committed per stream (the sink's dedupe watermark).

Layout of one dataset (a sink's ``path``, usually one per stream namespace)::

    <root>/date=YYYY-MM-DD/hour=HH/<stream slug>__<first>-<last>.parquet   (partition "hour")
    <root>/date=YYYY-MM-DD/<stream slug>__<first>-<last>.parquet           (partition "date")
    <root>/date=.../hour=HH/_compacted-<id>.msgpack    the last compaction's marker
    <root>/date=.../hour=HH/part-<id>-<n>.parquet      files a compaction merged

Names starting with ``.`` or ``_`` are invisible to Spark and pyarrow: temporary files,
a compaction's staging folder and its marker. A marker records, per stream, the newest token
of the sink files the compaction merged away, so the watermark survives compaction.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack

from orleanspy.errors import ConfigurationError
from orleanspy.logging import get_logger

__all__ = [
    "MARKER_PREFIX",
    "Token",
    "check_lake",
    "partitions",
    "read_marker",
    "remove_leftovers",
    "resolve_dataset",
    "sink_token_range",
    "watermark",
]

Token = tuple[int, int]

MARKER_PREFIX = "_compacted-"
_FILE = re.compile(r"^(?P<slug>.+)__(?P<s1>\d+)\.(?P<i1>\d+)-(?P<s2>\d+)\.(?P<i2>\d+)\.parquet$")
_log = get_logger(__name__)


def check_lake(
    lake: str | None, membership: str | None, key: str = "SparkOptions.lake ([spark] lake)",
) -> None:
    """Refuse a relative lake in a cluster (it would name a different folder on each silo).

    Raises:
        ConfigurationError: ``lake`` is relative and ``membership`` is set.
    """
    if lake is not None and membership is not None and not os.path.isabs(lake):
        raise ConfigurationError(
            f"{key} = {lake!r}: a relative lake path in a cluster would name a different "
            "folder for each silo (it resolves against each silo's data_dir); every silo and "
            "Spark must reach the same lake: give an absolute path to shared storage, e.g. "
            "[spark] lake = \"/shared/lake\"")


def resolve_dataset(path: str, lake: str | None, data_dir: str) -> Path:
    """The folder of a sink's dataset: ``path`` if absolute, else under the lake (itself
    under ``data_dir`` when relative), else under ``data_dir``."""
    p = Path(path)
    if p.is_absolute():
        return p
    if lake is not None:
        base = Path(lake)
        return (base if base.is_absolute() else Path(data_dir) / base) / p
    return Path(data_dir) / p


def sink_token_range(name: str) -> tuple[str, Token, Token] | None:
    """``(slug, first, last)`` of a sink file's name, or None for any other name."""
    m = _FILE.match(name)
    if m is None:
        return None
    return (m.group("slug"), (int(m.group("s1")), int(m.group("i1"))),
            (int(m.group("s2")), int(m.group("i2"))))


def partitions(root: Path) -> Iterator[Path]:
    """The visible partition folders of a dataset (``date=*`` and ``date=*/hour=*``) that
    hold files directly."""
    if not root.is_dir():
        return
    for day in sorted(root.iterdir()):
        if not day.name.startswith("date=") or not day.is_dir():
            continue
        yield day
        for hour in sorted(day.iterdir()):
            if hour.name.startswith("hour=") and hour.is_dir():
                yield hour


def _staging(root: Path) -> Iterator[Path]:
    """Staging folders of compactions (``.<partition>.compact-<id>``) a crash interrupted:
    their sink files were committed too (the watermark counts them until recovery)."""
    if not root.is_dir():
        return
    for parent in [root, *(p for p in root.iterdir() if p.name.startswith("date="))]:
        if parent.is_dir():
            yield from (p for p in parent.iterdir()
                        if p.name.startswith(".") and ".compact-" in p.name and p.is_dir())


def read_marker(path: Path) -> dict[str, Any]:
    """A compaction marker: ``id``, ``inputs`` (names replaced), ``outputs``, ``watermarks``
    (slug -> newest token merged away)."""
    data: dict[str, Any] = msgpack.unpackb(path.read_bytes(), raw=False)
    return data


def remove_leftovers(root: Path, slug: str) -> None:
    """Delete the temporary files a crash left for one stream."""
    for part in partitions(root):
        for leftover in part.glob(f".{slug}__*.tmp-*"):
            leftover.unlink(missing_ok=True)
            _log.info("parquet_sink_leftover_removed", file=str(leftover))


def watermark(root: Path, slug: str) -> Token | None:
    """The newest token committed for a stream: in sink file names and in compaction
    markers."""
    newest: Token | None = None
    for part in [*partitions(root), *_staging(root)]:
        try:
            names = list(part.iterdir())
        except FileNotFoundError:  # a compaction's staging folder, just cleaned up
            continue
        for path in names:
            name = path.name
            if name.startswith(MARKER_PREFIX):
                try:
                    raw = read_marker(path).get("watermarks", {}).get(slug)
                except (OSError, ValueError, msgpack.ExtraData) as exc:
                    _log.warning("lake_marker_unreadable", file=str(path), error=repr(exc))
                    continue
                last: Token | None = None if raw is None else (int(raw[0]), int(raw[1]))
            elif name.startswith(slug):
                parsed = sink_token_range(name)
                last = parsed[2] if parsed is not None and parsed[0] == slug else None
            else:
                continue
            if last is not None and (newest is None or last > newest):
                newest = last
    return newest
