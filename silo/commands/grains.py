"""``orleanspy grains locate TYPE KEY``: which silo of a cluster a grain is active on, from the
distributed directory (asked of a live silo; asking never activates the grain)."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from orleanspy import SiloOptions
from orleanspy.cluster.membership import SiloStatus
from orleanspy.errors import MessageRejectedError
from silo.commands.cluster_status import (
    add_arguments,
    ask_silos,
    cluster_options,
    read_membership,
)
from silo.commands.common import EXIT_OK, EXIT_USAGE, error, parse_key, usage
from silo.startup import configure_logging

__all__ = ["add_parser"]

EXIT_NOT_ACTIVE = 1

_EPILOG = """\
Prints "TYPE/KEY: active on SILO" (exit 0) or "TYPE/KEY: not active" (exit 1); a grain type
that is not placed through the directory (stateless workers) has no single silo. KEY is an
int if it looks like one, else a string (--key-type forces a type). --json prints the answer.
Exit codes: 0 active; 1 not active; 2 no silo answers, an unknown type or wrong arguments.

Example:
  orleanspy grains locate Counter alice --membership sqlite:/srv/shop/cluster.db
"""


def add_parser(commands: Any) -> None:
    """Register ``grains`` and its ``locate`` subcommand on the top-level subparsers."""
    grains = commands.add_parser("grains", help="inspect the grains of a cluster",
                                 description="Inspect the grains of a cluster.")
    grains.set_defaults(handler=lambda _: usage(grains))
    sub = grains.add_subparsers(dest="grains_command", metavar="SUBCOMMAND")
    locate = sub.add_parser(
        "locate", help="which silo a grain is active on",
        description="Ask a live silo of the cluster where a grain is active (its "
        "directory entry).", epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    locate.add_argument("type", metavar="TYPE", help="grain type name")
    locate.add_argument("key", metavar="KEY", help="grain key")
    locate.add_argument("--key-type", choices=("auto", "int", "str", "uuid"), default="auto",
                        help="how to read KEY (default: auto: int if it looks like one)")
    add_arguments(locate)
    locate.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handle ``orleanspy grains locate``."""
    try:
        key = parse_key(args.key, args.key_type)
    except ValueError as exc:
        error(f"KEY {args.key!r} is not a valid {args.key_type} key: {exc}")
        return EXIT_USAGE
    options = cluster_options(args, "grains locate")
    if isinstance(options, int):
        return options
    configure_logging("console", "error")
    return asyncio.run(_locate(options, args.type, key, args.timeout, args.json))


async def _locate(options: SiloOptions, type_name: str, key: Any, timeout: float,
                  as_json: bool) -> int:
    data = await read_membership(options)
    if isinstance(data, int):
        return data
    live = [e for e in data.entries() if e.status is SiloStatus.ACTIVE]
    for entry in live:
        (answer,) = await ask_silos(options, [entry], "locate", timeout, [type_name, key])
        if isinstance(answer, MessageRejectedError):
            error(str(answer))
            return EXIT_USAGE
        if isinstance(answer, dict):
            if as_json:
                print(json.dumps(answer), flush=True)
            elif not answer["directory"]:
                print(f"{answer['grain']}: {type_name} is not placed through the directory "
                      "(stateless worker): it has no single silo", flush=True)
            elif answer["silo"] is None:
                print(f"{answer['grain']}: not active", flush=True)
            else:
                print(f"{answer['grain']}: active on {answer['silo']}", flush=True)
            return EXIT_OK if answer.get("silo") else EXIT_NOT_ACTIVE
    error(f"no active silo of cluster {options.cluster_id} answered")
    return EXIT_USAGE
