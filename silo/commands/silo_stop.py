"""``orleanspy silo stop``: stop silos started on this machine by ``orleanspy silo start``,
gracefully (SIGTERM: the silo hands its queues and grains over and leaves the cluster), and
wait until each has exited.

Silos are found by their run records in the data dir (``silo/run_records.py``); a signal goes
only to a process whose start time matches its record, never to a pid that another process
has taken since.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from silo.commands.common import EXIT_CALL_FAILED, EXIT_OK, EXIT_USAGE, error
from silo.config import find_config_file, load_config
from silo.run_records import RunRecord, alive, read_records

__all__ = ["add_subcommand"]

_EPILOG = """\
SILO is a silo's address (as `cluster status` prints it, with or without its @generation),
its gateway address or its pid; with no SILO the only silo running from the data dir is
stopped (several: name them, or --all). The data dir is --data-dir, else the config file's,
else .orleanspy. Prints one line per silo: "stopped SILO (pid N) in S s".
Exit codes: 0 every silo named stopped; 1 one still runs after --timeout (it goes on
shutting down); 2 no such silo, or the arguments are wrong.

Examples:
  orleanspy silo stop
  orleanspy silo stop 127.0.0.1:11111 --data-dir /srv/shop/data
  orleanspy silo stop --all --timeout 60
"""


def add_subcommand(silo_commands: Any) -> None:
    """Register ``silo stop`` on the ``silo`` subparsers."""
    stop = silo_commands.add_parser(
        "stop", help="stop silos started on this machine, gracefully",
        description="Stop silos that `orleanspy silo start` runs on this machine (found in "
        "the data dir), gracefully, and wait until they have exited.", epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    stop.add_argument("silos", nargs="*", metavar="SILO", help="silo address, gateway or pid")
    stop.add_argument("--all", action="store_true", help="stop every silo of the data dir")
    stop.add_argument("--data-dir", metavar="DIR",
                      help="the silos' data dir (default: the config file's, else .orleanspy)")
    stop.add_argument("--config", metavar="FILE",
                      help="TOML config file to take data_dir from")
    stop.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                      help="how long to wait for each silo to exit (default: 60)")
    stop.add_argument("--json", action="store_true", help="print the outcome as JSON")
    stop.set_defaults(handler=run)


def _data_dir(args: argparse.Namespace) -> tuple[Path, str]:
    """The silos' data dir and where it comes from: the flag, then ORLEANSPY_DATA_DIR,
    then the config file, then the default."""
    config = load_config(find_config_file(args.config), {"data_dir": args.data_dir},
                         defaults={}, flag_names={"data_dir": "--data-dir"})
    return Path(config.options.data_dir), config.sources["data_dir"]


def run(args: argparse.Namespace) -> int:
    """Handle ``orleanspy silo stop``."""
    if args.timeout <= 0:
        error("--timeout must be > 0 seconds")
        return EXIT_USAGE
    if args.all and args.silos:
        error("name silos or give --all, not both")
        return EXIT_USAGE
    data_dir, source = _data_dir(args)
    records = read_records(data_dir)
    if not records:
        error(f"no silo started by `orleanspy silo start` runs from data dir {data_dir} "
              f"(data_dir: {source}; pass the silos' --data-dir)")
        return EXIT_USAGE
    chosen = _choose(records, args.silos, args.all)
    if isinstance(chosen, int):
        return chosen
    for record in chosen:  # signal every one first: they shut down in parallel
        if alive(record.pid, record.started):
            with contextlib.suppress(ProcessLookupError):
                os.kill(record.pid, signal.SIGTERM)
    outcomes = []
    began = time.monotonic()
    for record in chosen:
        while alive(record.pid, record.started) and time.monotonic() - began < args.timeout:
            time.sleep(0.05)
        gone = not alive(record.pid, record.started)
        outcomes.append({"silo": record.silo, "pid": record.pid, "stopped": gone,
                         "seconds": round(time.monotonic() - began, 2)})
    if args.json:
        print(json.dumps(outcomes), flush=True)
    else:
        for o in outcomes:
            if o["stopped"]:
                print(f"stopped {o['silo']} (pid {o['pid']}) in {o['seconds']:.1f} s",
                      flush=True)
            else:
                print(f"{o['silo']} (pid {o['pid']}) still shutting down after "
                      f"{args.timeout:g} s", flush=True)
    return EXIT_OK if all(o["stopped"] for o in outcomes) else EXIT_CALL_FAILED


def _choose(records: list[RunRecord], names: list[str], every: bool) -> list[RunRecord] | int:
    if every:
        return records
    if not names:
        if len(records) == 1:
            return records
        error(f"{len(records)} silos run from this data dir: name the ones to stop (or "
              f"--all): {', '.join(f'{r.silo} (pid {r.pid})' for r in records)}")
        return EXIT_USAGE
    chosen: list[RunRecord] = []
    for name in names:
        match = [r for r in records if r.matches(name)]
        if not match:
            error(f"no silo {name!r} runs from this data dir; running: "
                  f"{', '.join(f'{r.silo} (pid {r.pid})' for r in records)}")
            return EXIT_USAGE
        chosen.extend(r for r in match if r not in chosen)
    return chosen
