"""``orleanspy cluster status``: list the silos of a cluster from its membership table,
with what each live silo reports about itself."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

from orleanspy import ConfigurationError, SiloOptions
from orleanspy._util.urls import anchor_sqlite, parse_backend_url
from orleanspy.cluster.membership import SiloStatus
from orleanspy.cluster.transport import query_silo
from orleanspy.errors import MembershipError, MessageRejectedError
from orleanspy.hosting.builder import open_membership_table
from orleanspy.runtime.options import BACKENDS_OF
from silo.commands.common import CLI_DEFAULTS, EXIT_OK, EXIT_USAGE, error, print_table, usage
from silo.config import find_config_file, load_config
from silo.startup import configure_logging

__all__ = ["add_arguments", "add_parser", "ask_silos", "cluster_options", "read_membership"]

_EPILOG = """\
Columns: SILO (host:port@generation), STATUS (joining, active, shutting_down, dead), UPTIME
(now minus the start time in the table), ACTIVATIONS and QUEUES (asked of the silo itself;
"-" if it does not answer), GATEWAY (client port). --json prints one JSON list instead.
Exit codes: 0 ok; 2 the membership table cannot be read or the arguments are wrong.

Example:
  orleanspy cluster status --membership sqlite:cluster.db --cluster-id prod
"""


def add_parser(commands: Any) -> None:
    """Register ``cluster`` and its ``status`` subcommand on the top-level subparsers."""
    cluster = commands.add_parser(
        "cluster", help="inspect a cluster", description="Inspect a cluster of silos.",
    )
    cluster.set_defaults(handler=lambda _: usage(cluster))
    cluster_commands = cluster.add_subparsers(dest="cluster_command", metavar="SUBCOMMAND")
    status = cluster_commands.add_parser(
        "status", help="list the silos of a cluster",
        description="Read the membership table and list every silo: status, address, "
        "uptime (from the table), and, for each silo that answers on its silo port, its "
        "activation count and the stream queues it owns.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(status)
    status.set_defaults(handler=run)


def add_arguments(p: argparse.ArgumentParser, *, timeout: float = 3.0) -> None:
    """The options of the commands that read a cluster's membership table (``timeout``: the
    default wait for each silo's answer)."""
    p.add_argument("--membership", metavar="URL",
                   help="membership table: sqlite:PATH (relative to --data-dir), "
                   "redis://HOST:PORT/DB?prefix=P or postgresql://USER@HOST:PORT/DB?schema=S "
                   "(default: from the config file)")
    p.add_argument("--config", metavar="FILE",
                   help="TOML config file to take membership, cluster_id, secret from")
    p.add_argument("--cluster-id", help="cluster id (default: dev)")
    p.add_argument("--secret", help="shared secret of the silos, if they have one")
    p.add_argument("--data-dir", metavar="DIR",
                   help="folder of relative SQLite paths (default: .orleanspy)")
    p.add_argument("--timeout", type=float, default=timeout, metavar="SECONDS",
                   help=f"how long to wait for each silo's answer (default: {timeout:g})")
    p.add_argument("--json", action="store_true", help="print one JSON list")


def run(args: argparse.Namespace) -> int:
    """Handle ``orleanspy cluster status``."""
    options = cluster_options(args, "cluster status")
    if isinstance(options, int):
        return options
    configure_logging("console", "error")
    return asyncio.run(_cluster_status(options, args.timeout, args.json))


def cluster_options(args: argparse.Namespace, command: str) -> SiloOptions | int:
    """The options naming the cluster's membership table (from flags and the config file),
    or an exit code after an error that says what is wrong."""
    # This tool only reads the table: a relative path names a file in --data-dir.
    membership = args.membership
    if membership is not None:
        membership = anchor_sqlite(membership, args.data_dir or str(CLI_DEFAULTS["data_dir"]))
    flags = {"membership": membership, "cluster_id": args.cluster_id,
             "secret": args.secret, "data_dir": args.data_dir}
    options = load_config(find_config_file(args.config), flags, defaults=CLI_DEFAULTS).options
    if options.membership is None:
        raise ConfigurationError(
            f"{command} needs the membership table: pass --membership sqlite:PATH "
            "(the silos' --membership), or set membership in orleanspy.toml"
        )
    parsed = parse_backend_url(options.membership, key="membership", data_dir=options.data_dir,
                               allow=BACKENDS_OF["membership"])
    if parsed.scheme == "sqlite" and not os.path.isfile(parsed.path):
        error(f"no membership table at {parsed.path} (membership = {options.membership}, "
              f"relative to --data-dir {options.data_dir}): give the file the silos use")
        return EXIT_USAGE  # and do not create an empty one
    return options


async def _cluster_status(options: SiloOptions, timeout: float, as_json: bool) -> int:
    data = await read_membership(options)
    if isinstance(data, int):
        return data
    now = time.time()
    entries = sorted(data.entries(), key=lambda e: (e.silo.host, e.silo.port,
                                                     e.silo.generation))
    answers = await ask_silos(options, entries, "status", timeout)
    rows: list[dict[str, Any]] = []
    for entry, answer in zip(entries, answers, strict=True):
        live = entry.status is not SiloStatus.DEAD
        rows.append({
            "silo": str(entry.silo),
            "status": entry.status.value,
            "uptime": round(now - entry.start_time, 1) if live else None,
            "activations": answer["activations"] if answer else None,
            "queues": answer["queues"] if answer else None,
            "gateway": (f"{entry.silo.host}:{entry.gateway_port}"
                        if entry.gateway_port else None),
            "reachable": answer is not None,
        })
    if as_json:
        print(json.dumps(rows), flush=True)
        return EXIT_OK
    print(f"cluster {options.cluster_id}: {sum(r['status'] == 'active' for r in rows)} active, "
          f"{len(rows)} in the table (version {data.version.version})")
    _print_table(rows)
    return EXIT_OK


async def ask_silos(options: SiloOptions, entries: list[Any], op: str,
                    timeout: float, args: list[Any] | None = None) -> list[Any]:
    """Each live silo's answer to the read-only control request ``op`` (None for a dead or
    silent one; the error itself for a request the silo refused), asked at once."""

    async def ask(entry: Any) -> Any:
        if entry.status is SiloStatus.DEAD:
            return None
        try:
            return await query_silo(entry.silo.host, entry.silo.port, op, list(args or []),
                                    cluster_id=options.cluster_id, secret=options.secret,
                                    timeout=timeout)
        except MessageRejectedError as exc:
            return exc
        except (Exception, TimeoutError):
            return None

    return list(await asyncio.gather(*(ask(e) for e in entries)))


async def read_membership(options: SiloOptions) -> Any:
    """The membership table's rows, or an exit code after an error that says why."""
    assert options.membership is not None
    table = open_membership_table(options.membership, options.cluster_id, options.data_dir)
    try:
        data = await table.read_all()
        others = await table.cluster_ids() if not data.rows else None
    except MembershipError as exc:
        error(f"cannot read the membership table {options.membership}: {exc}")
        return EXIT_USAGE
    finally:
        await table.close()
    if others is not None:
        held = [c for c in others if c != options.cluster_id]
        if held:
            error(f"cluster {options.cluster_id} has no silo in {options.membership}; it "
                  f"holds cluster {', '.join(held)}: pass --cluster-id")
            return EXIT_USAGE
    return data


async def read_live_silos(options: SiloOptions) -> list[Any] | int:
    """The membership rows of the active silos, or an exit code (``read_membership``)."""
    data = await read_membership(options)
    if isinstance(data, int):
        return data
    return [e for e in data.entries() if e.status is SiloStatus.ACTIVE]


def _print_table(rows: list[dict[str, Any]]) -> None:
    header = ("SILO", "STATUS", "UPTIME", "ACTIVATIONS", "QUEUES", "GATEWAY")
    lines: list[tuple[str, ...]] = [header]
    for r in rows:
        queues = r["queues"]
        queue_text = "-" if queues is None else (
            "; ".join(f"{name}: {len(qs)} ({', '.join(qs)})" for name, qs in queues.items())
            or "none"
        )
        lines.append((
            r["silo"], r["status"],
            "-" if r["uptime"] is None else f"{r['uptime']:.0f}s",
            "-" if r["activations"] is None else str(r["activations"]),
            queue_text, r["gateway"] or "-",
        ))
    print_table(lines)
