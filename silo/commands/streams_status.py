"""``orleanspy streams status``: every stream queue of a cluster, asked of the silo that owns
it: cache fill, pressure, pull period, what was read, delivered and acknowledged, failed
deliveries, and each subscription's lag."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from orleanspy import SiloOptions
from silo.commands import streams_admin
from silo.commands.cluster_status import (
    add_arguments,
    ask_silos,
    cluster_options,
    read_membership,
    refusals,
)
from silo.commands.common import EXIT_OK, EXIT_USAGE, print_table, usage
from silo.dashboard.view import queue_rows, subscription_order
from silo.startup import configure_logging

__all__ = ["add_parser"]

_EPILOG = """\
Columns: PROVIDER, QUEUE, SILO (its owner), CACHE (containers cached / bound, "!" under
pressure), PULL (the agent's current pull period), READ, DELIVERED, ACKED (containers
acknowledged to the queue), FAILED (failed delivery attempts), SUBS (subscriptions),
LAG (the furthest a subscription is behind, in queue positions), AGE (how long ago the oldest
event a subscription has yet to take was written). A second table lists every subscription,
failing first, then furthest behind: PROVIDER, QUEUE, STREAM, CONSUMER (the consumer grain),
SUBSCRIPTION (its id within the stream), LAG, AGE, FAILING (failed attempts of the delivery
under way). Queues of silos that do not answer are missing. --json prints one JSON list of
queue rows instead, each with its subscriptions under "subs".
Exit codes: 0 ok; 2 the membership table cannot be read or the arguments are wrong.

Example:
  orleanspy streams status --membership sqlite:/srv/shop/cluster.db --cluster-id prod
"""


def add_parser(commands: Any) -> None:
    """Register ``streams`` and its ``status`` subcommand on the top-level subparsers."""
    streams = commands.add_parser(
        "streams", help="inspect the stream queues of a cluster, manage subscriptions and "
        "agents", description="Inspect the stream queues of a cluster; list and remove a "
        "stream's subscriptions; stop, start and show a provider's pulling agents.",
    )
    streams.set_defaults(handler=lambda _: usage(streams))
    sub = streams.add_subparsers(dest="streams_command", metavar="SUBCOMMAND")
    status = sub.add_parser(
        "status", help="list every stream queue with its owner and figures",
        description="Read the membership table and ask each live silo about the stream "
        "queues it owns.", epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(status)
    status.set_defaults(handler=run)
    streams_admin.add_subcommands(sub)


def run(args: argparse.Namespace) -> int:
    """Handle ``orleanspy streams status``."""
    options = cluster_options(args, "streams status")
    if isinstance(options, int):
        return options
    configure_logging("console", "error")
    return asyncio.run(_streams_status(options, args.timeout, args.json))


async def _streams_status(options: SiloOptions, timeout: float, as_json: bool) -> int:
    data = await read_membership(options)
    if isinstance(data, int):
        return data
    entries = list(data.entries())
    answers = await ask_silos(options, entries, "streams", timeout)
    rows = [row for answer in answers if isinstance(answer, dict)
            for row in queue_rows(answer)]
    rows.sort(key=lambda r: (r["provider"], _queue_order(r["queue"])))
    refused = refusals(answers)
    if as_json:
        print(json.dumps(rows), flush=True)
    else:
        _print_table(rows)
    return EXIT_USAGE if refused else EXIT_OK


def _queue_order(queue: str) -> tuple[str, int]:
    name, _, index = queue.rpartition("-")
    return (name, int(index)) if index.isdigit() else (queue, 0)


def _print_table(rows: list[dict[str, Any]]) -> None:
    header = ("PROVIDER", "QUEUE", "SILO", "CACHE", "PULL", "READ", "DELIVERED", "ACKED",
              "FAILED", "SUBS", "LAG", "AGE")
    lines = [header, *(
        (r["provider"], r["queue"], r["silo"],
         f"{r['cache']}/{r['cache_max']}{'!' if r['under_pressure'] else ''}",
         f"{r['pull_period'] * 1000:.0f}ms", str(r["read"]), str(r["delivered"]),
         str(r["acknowledged"]), str(r["failures"]), str(r["subscriptions"]),
         str(r["max_lag"]), "-" if r["max_age"] is None else f"{r['max_age']:.1f}s")
        for r in rows
    )]
    if not rows:
        print("no stream queues are owned by a silo that answers", flush=True)
        return
    print_table(lines)
    subs = sorted(({"provider": r["provider"], "queue": r["queue"], **s}
                   for r in rows for s in r["subs"]), key=subscription_order)
    if subs:
        print(flush=True)
        print_table([("PROVIDER", "QUEUE", "STREAM", "CONSUMER", "SUBSCRIPTION", "LAG", "AGE",
                      "FAILING"), *(
            (s["provider"], s["queue"], s["stream"], s["consumer"], s["subscription"],
             str(s["lag"]), "-" if s["age"] is None else f"{s['age']:.1f}s",
             str(s["failing"])) for s in subs)])
