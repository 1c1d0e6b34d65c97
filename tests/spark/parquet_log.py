"""What Spark's file sink has committed: the files its ``_spark_metadata`` log lists (files
of a micro-batch cut short by a crash are on disk but not listed), read without Spark."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow.parquet as pq

__all__ = ["committed_files", "committed_rows"]


def committed_files(out: Path) -> list[Path]:
    log = out / "_spark_metadata"
    files: set[str] = set()
    if not log.is_dir():
        return []
    for entry in log.iterdir():
        if entry.name.startswith("."):
            continue
        try:
            lines = entry.read_text(encoding="utf-8").splitlines()[1:]  # "v1", then JSON
        except OSError:
            continue
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:  # a log file being written
                continue
            path = unquote(urlparse(record["path"]).path)
            if record.get("action") == "delete":
                files.discard(path)
            else:
                files.add(path)
    return sorted(Path(f) for f in files)


def committed_rows(out: Path) -> list[dict[str, object]]:
    """Every committed row (``key``, ``event``, ``sequence``, ``index``)."""
    rows: list[dict[str, object]] = []
    for path in committed_files(out):
        rows += pq.read_table(path, columns=["key", "event", "sequence", "index"]).to_pylist()
    return rows
