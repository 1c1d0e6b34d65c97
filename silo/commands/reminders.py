"""``orleanspy reminders list``: the reminders in a reminder table, with their next due time
and, given the cluster's membership table, the silo that owns each (the owner of its grain
on the directory's ring of active silos)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

from orleanspy import ConfigurationError, SiloOptions
from orleanspy._util.urls import anchor_sqlite, parse_backend_url
from orleanspy.cluster.directory import DirectoryRing
from orleanspy.cluster.membership import SiloStatus
from orleanspy.hosting.builder import open_reminder_table
from orleanspy.runtime.options import BACKENDS_OF
from silo.commands.cluster_status import read_membership
from silo.commands.common import CLI_DEFAULTS, EXIT_OK, EXIT_USAGE, error, print_table, usage
from silo.config import find_config_file, load_config
from silo.startup import configure_logging

__all__ = ["add_parser"]

_EPILOG = """\
Columns: GRAIN (type/key), NAME, PERIOD, NEXT (the next time it is due, UTC), OWNER (the silo
that fires it; with --membership only). --grain TYPE/KEY lists one grain's reminders.
--json prints one JSON list instead. The table is only read.
Exit codes: 0 ok; 2 the table cannot be read or the arguments are wrong.

Example:
  orleanspy reminders list --reminders sqlite:/srv/shop/orleanspy.db \\
      --membership sqlite:/srv/shop/cluster.db
"""


def add_parser(commands: Any) -> None:
    """Register ``reminders`` and its ``list`` subcommand on the top-level subparsers."""
    reminders = commands.add_parser("reminders", help="inspect durable reminders",
                                    description="Inspect the reminders of a reminder table.")
    reminders.set_defaults(handler=lambda _: usage(reminders))
    sub = reminders.add_subparsers(dest="reminders_command", metavar="SUBCOMMAND")
    p = sub.add_parser("list", help="list the reminders of a reminder table",
                       description="Read the reminder table and list every reminder.",
                       epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reminders", metavar="URL",
                   help="reminder table: sqlite:PATH (relative to --data-dir), "
                   "redis://HOST:PORT/DB?prefix=P or postgresql://USER@HOST:PORT/DB?schema=S "
                   "(default: from the config file, else sqlite:orleanspy.db)")
    p.add_argument("--membership", metavar="URL",
                   help="the cluster's membership table, to show each reminder's owner")
    p.add_argument("--cluster-id", help="cluster id (default: dev)")
    p.add_argument("--config", metavar="FILE", help="TOML config file to take settings from")
    p.add_argument("--data-dir", metavar="DIR",
                   help="folder of relative SQLite paths (default: .orleanspy)")
    p.add_argument("--grain", metavar="TYPE/KEY", help="only this grain's reminders")
    p.add_argument("--json", action="store_true", help="print one JSON list")
    p.set_defaults(handler=run)


def _absolute(url: str | None, data_dir: str | None) -> str | None:
    """A relative ``sqlite:`` path of this read-only tool names a file in ``data_dir``."""
    if url is None:
        return None
    return anchor_sqlite(url, data_dir or str(CLI_DEFAULTS["data_dir"]))


def run(args: argparse.Namespace) -> int:
    """Handle ``orleanspy reminders list``."""
    flags = {"reminders": _absolute(args.reminders, args.data_dir),
             "membership": _absolute(args.membership, args.data_dir),
             "cluster_id": args.cluster_id, "data_dir": args.data_dir}
    # The silos' default: in the data dir, or in a cluster beside the membership table.
    options = load_config(find_config_file(args.config), flags, defaults=CLI_DEFAULTS).options
    for name in ("reminders", "membership"):
        url = getattr(options, name)
        if url is None:
            continue
        parsed = parse_backend_url(url, key=name, data_dir=options.data_dir,
                                   allow=BACKENDS_OF[name])
        if parsed.scheme == "memory":
            raise ConfigurationError(f"{name} = memory: a process's own table; give the "
                                     "file or server the silos use")
        if parsed.scheme == "sqlite" and not os.path.isfile(parsed.path):
            error(f"no {name} table at {os.path.abspath(parsed.path)}: give the file the silos use")
            return EXIT_USAGE  # and do not create an empty one
    grain = None
    if args.grain is not None:
        type_name, sep, key = args.grain.partition("/")
        if not sep or not type_name or not key:
            error(f"--grain {args.grain!r}: write TYPE/KEY, e.g. Counter/alice")
            return EXIT_USAGE
        grain = (type_name, key)
    configure_logging("console", "error")
    return asyncio.run(_list(options, grain, args.json))


async def _list(options: SiloOptions, grain: tuple[str, str] | None, as_json: bool) -> int:
    table = open_reminder_table(options.reminders, options.data_dir)
    try:
        await table.open()
        entries = await table.read_all()
    finally:
        await table.close()
    if grain is not None:
        entries = [e for e in entries if (e.grain_id.type_name, str(e.grain_id.key)) == grain]
    ring = None
    if options.membership is not None:
        data = await read_membership(options)
        if isinstance(data, int):
            return data
        ring = DirectoryRing([e.silo for e in data.entries() if e.status is SiloStatus.ACTIVE])
    now = time.time()
    rows: list[dict[str, Any]] = []
    for e in sorted(entries, key=lambda e: (e.grain_id.type_name, str(e.grain_id.key), e.name)):
        due = e.start_at
        if due < now and e.period > 0:
            due += ((now - due) // e.period + 1) * e.period
        owner = ring.owner(e.grain_id) if ring is not None else None
        rows.append({"grain": f"{e.grain_id.type_name}/{e.grain_id.key}", "name": e.name,
                     "period": e.period, "next": due,
                     "owner": str(owner) if owner is not None else None})
    if as_json:
        print(json.dumps(rows), flush=True)
        return EXIT_OK
    if not rows:
        print("no reminders", flush=True)
        return EXIT_OK
    header = ("GRAIN", "NAME", "PERIOD", "NEXT", "OWNER")
    lines: list[tuple[str, ...]] = [header, *(
        (r["grain"], r["name"], f"{r['period']:g}s",
         time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(r["next"])), r["owner"] or "-")
        for r in rows
    )]
    print_table(lines)
    return EXIT_OK
