"""Run records: each ``orleanspy silo start`` process writes ``DATA_DIR/run/PID.json`` once
its silo is ready (its silo address, gateway, cluster and dashboard, and its process's start
time) and removes it when it exits; ``orleanspy silo stop`` reads them.

Where ``/proc`` exists, a record is trusted only when ``/proc`` confirms both its start
time (``/proc/PID/stat``, clock ticks since boot) and that the process's command line is an
``orleanspy silo start`` (``silo start`` in ``/proc/PID/cmdline``): a process that took the
pid of a silo that died without removing its record (``kill -9``), or a record written by
hand or without a start time, never makes ``silo stop`` signal an unrelated process; such a
record is stale and is removed when read. Where ``/proc`` is missing the record is trusted
while the pid lives.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["RunRecord", "alive", "is_silo_process", "process_start", "read_records",
           "remove_record", "write_record"]

RUN_DIR = "run"


@dataclass(frozen=True, slots=True)
class RunRecord:
    path: Path
    pid: int
    silo: str
    gateway: str | None
    cluster: str
    dashboard: str | None
    started: str | None  # the process's start time (``process_start``), if known

    def matches(self, name: str) -> bool:
        """Whether ``name`` (a silo address, its host:port, a gateway or a pid) names it."""
        return name in (self.silo, self.silo.split("@", 1)[0], self.gateway, str(self.pid))


def process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (None: no /proc, or no process)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22; the command name (field 2) is in parentheses and may hold spaces.
    return stat.rsplit(")", 1)[1].split()[19]


def is_silo_process(pid: int) -> bool:
    """Whether ``/proc/PID/cmdline`` is an ``orleanspy silo start`` command."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(a == b"silo" and b == b"start" for a, b in itertools.pairwise(args))


def alive(pid: int, started: str | None) -> bool:
    """Whether ``pid`` is still the silo process that wrote a record with ``started``."""
    if Path("/proc/self/stat").is_file():
        return started is not None and process_start(pid) == started and is_silo_process(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_record(data_dir: str | Path, fields: dict[str, Any]) -> Path:
    """Write this process's record (atomically: a reader never sees half of it)."""
    folder = Path(data_dir) / RUN_DIR
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    pid = os.getpid()
    path = folder / f"{pid}.json"
    tmp = folder / f".{pid}.json.tmp"
    tmp.write_text(json.dumps({**fields, "pid": pid, "started": process_start(pid)}))
    tmp.replace(path)
    return path


def remove_record(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def read_records(data_dir: str | Path) -> list[RunRecord]:
    """The records of live silos in ``data_dir``, by pid; stale ones are removed."""
    folder = Path(data_dir) / RUN_DIR
    records = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            raw = json.loads(path.read_text())
            pid = int(raw["pid"])
            started = raw.get("started")
            record = RunRecord(path, pid, str(raw["silo"]), raw.get("gateway"),
                               str(raw.get("cluster", "")), raw.get("dashboard"),
                               started if isinstance(started, str) else None)
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being written, or not ours: leave it
        if pid <= 0 or path.stem != str(pid):
            continue
        if not alive(pid, record.started):
            remove_record(path)
            continue
        records.append(record)
    return sorted(records, key=lambda r: r.pid)
