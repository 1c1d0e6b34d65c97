"""``orleanspy grains locate TYPE KEY``: which silo of a cluster a grain is active on, from the
distributed directory (asked of a live silo; asking never activates the grain).
``orleanspy grains top``: the busiest grain methods of a cluster over an interval, with their
errors and latency quantiles, from every live silo's call statistics.
``orleanspy grains show TYPE KEY``: the grain page (where it lives, since when, its mailbox,
its type's call figures, reminders, stream subscriptions and, when the silo shows it, its
state), read without activating the grain."""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
from collections.abc import Callable
from typing import Any

from orleanspy import ConfigurationError, SiloOptions
from orleanspy.errors import MessageRejectedError
from orleanspy.runtime.call_stats import (
    MethodFigures,
    figures,
    is_snapshot,
    merge,
    method_label,
)
from silo.commands.cluster_status import (
    add_arguments,
    ask_silos,
    cluster_options,
    read_live_silos,
    refusals,
)
from silo.commands.common import EXIT_OK, EXIT_USAGE, error, parse_key, print_table, usage
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


_TOP_EPILOG = """\
Asks every live silo for its call statistics twice, --interval seconds apart, and prints the
methods with the most calls in between, busiest first: TYPE, METHOD, CALLS/S, ERRORS (calls
that raised), P50 and P99 (a turn's time from its start to its end, queueing excluded; read
from power-of-two buckets; in each second a method's first 1,024 calls on a silo are timed,
then one call in 32), MEAN. --interval 0 shows the totals
since each silo started. --json prints the rows.
Exit codes: 0 ok; 2 the membership table cannot be read or the arguments are wrong.

Example:
  orleanspy grains top --membership sqlite:/srv/shop/cluster.db --interval 5 --limit 10
"""


_SHOW_EPILOG = """\
Asks a live silo of the cluster for the grain page. The directory says where the grain is
active; that silo reads its activation table, so asking never activates the grain. Shows:
where it lives (or "not active"), since when, its mailbox (queued, running), the call figures
of its type on that silo (calls, errors, latency: figures are kept per type and method, not
per grain), its reminder rows, the stream subscriptions the pulling agents deliver to it and
the namespaces its class subscribes to implicitly. Its state as JSON is shown only when the
silo sets grain_page_state (ORLEANSPY_GRAIN_PAGE_STATE): an active grain's from memory, an
inactive one's from storage, each state cut at 64 KiB (marked truncated). KEY as for locate.
--json prints the page.
Exit codes: 0 active; 1 not active; 2 no silo answers, an unknown type or wrong arguments.

Example:
  orleanspy grains show Counter alice --membership sqlite:/srv/shop/cluster.db
"""


def add_parser(commands: Any) -> None:
    """Register ``grains`` and its ``locate``, ``show`` and ``top`` subcommands."""
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
    show = sub.add_parser(
        "show", help="a grain's page: silo, mailbox, figures, reminders, streams, state",
        description="Show what the cluster knows of one grain, without activating it.",
        epilog=_SHOW_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    show.add_argument("type", metavar="TYPE", help="grain type name")
    show.add_argument("key", metavar="KEY", help="grain key")
    show.add_argument("--key-type", choices=("auto", "int", "str", "uuid"), default="auto",
                      help="how to read KEY (default: auto: int if it looks like one)")
    add_arguments(show)
    show.set_defaults(handler=run_show)
    top = sub.add_parser(
        "top", help="the busiest grain methods, with errors and latency",
        description="Ask every live silo of the cluster for its grain call statistics and "
        "show the busiest methods.", epilog=_TOP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    top.add_argument("--interval", type=float, default=2.0, metavar="SECONDS",
                     help="measure over this many seconds (default 2; 0: totals since start)")
    top.add_argument("--limit", type=int, default=20, metavar="N",
                     help="show the N busiest methods (default 20)")
    add_arguments(top)
    top.set_defaults(handler=run_top)


def run(args: argparse.Namespace) -> int:
    """Handle ``orleanspy grains locate``."""
    return _ask_about_grain(args, "grains locate", "locate", _print_location)


def run_show(args: argparse.Namespace) -> int:
    """Handle ``orleanspy grains show``."""
    return _ask_about_grain(args, "grains show", "grain",
                            lambda answer, _type_name: _print_page(answer))


def _ask_about_grain(args: argparse.Namespace, command: str, operation: str,
                     show: Callable[[dict[str, Any], str], None]) -> int:
    """Ask the live silos, one at a time, ``operation`` about the grain TYPE KEY; print the
    first answer (``show``, or JSON)."""
    try:
        key = parse_key(args.key, args.key_type)
    except ValueError as exc:
        error(f"KEY {args.key!r} is not a valid {args.key_type} key: {exc}")
        return EXIT_USAGE
    options = cluster_options(args, command)
    if isinstance(options, int):
        return options
    configure_logging("console", "error")
    return asyncio.run(_ask(options, operation, args.type, key, args.timeout, args.json, show))


async def _ask(options: SiloOptions, operation: str, type_name: str, key: Any,
               timeout: float, as_json: bool,
               show: Callable[[dict[str, Any], str], None]) -> int:
    live = await read_live_silos(options)
    if isinstance(live, int):
        return live
    for entry in live:
        (answer,) = await ask_silos(options, [entry], operation, timeout, [type_name, key])
        if isinstance(answer, MessageRejectedError):
            error(str(answer))
            return EXIT_USAGE
        if refusals([answer]):
            return EXIT_USAGE
        if isinstance(answer, dict):
            if as_json:
                print(json.dumps(answer), flush=True)
            else:
                show(answer, type_name)
            found = answer.get("silo") if operation == "locate" else answer.get("active")
            return EXIT_OK if found else EXIT_NOT_ACTIVE
    error(f"no active silo of cluster {options.cluster_id} answered")
    return EXIT_USAGE


def _print_location(answer: dict[str, Any], type_name: str) -> None:
    if not answer["directory"]:
        print(f"{answer['grain']}: {type_name} is not placed through the directory "
              "(stateless worker): it has no single silo", flush=True)
    elif answer["silo"] is None:
        print(f"{answer['grain']}: not active", flush=True)
    else:
        print(f"{answer['grain']}: active on {answer['silo']}", flush=True)


def _print_page(page: dict[str, Any]) -> None:
    name = page["grain"]
    if not page.get("directory", True):
        print(f"{name}: {page['type']} is not placed through the directory (stateless "
              "worker): it has no single silo", flush=True)
        return
    if not page.get("active"):
        print(f"{name}: not active", flush=True)
    else:
        since = datetime.datetime.fromtimestamp(page["since"], datetime.UTC) \
            if isinstance(page.get("since"), (int, float)) else None
        print(f"{name}: active on {page['silo']}"
              + (f" since {since:%Y-%m-%d %H:%M:%S} UTC" if since else ""), flush=True)
        if page.get("unreachable"):
            print(f"  its silo did not answer: {page['unreachable']}", flush=True)
        box = page.get("mailbox")
        if box:
            print(f"  mailbox: {box['queued']} queued, {box['running']} running, "
                  f"{box['blocked_senders']} blocked senders (capacity {box['capacity']}, "
                  f"most queued {box['max_queued']})", flush=True)
    methods = page.get("methods") or []
    if methods:
        print(f"methods of {page['type']} on {page.get('methods_silo')}:", flush=True)
        print_table([("METHOD", "CALLS", "ERRORS", "P50", "P99", "MEAN"), *(
            (m["method"], str(m["calls"]), str(m["errors"]), _ms(m["p50_seconds"]),
             _ms(m["p99_seconds"]), _ms(m["mean_seconds"])) for m in methods)])
    reminders = page.get("reminders") or []
    print(f"reminders: {len(reminders)}", flush=True)
    for r in reminders:
        print(f"  {r['name']}: every {r['period']:g} s from {r['start_at']:.0f}", flush=True)
    implicit = page.get("implicit_namespaces") or []
    if implicit:
        print(f"implicit subscriptions (namespaces): {', '.join(implicit)}", flush=True)
    subs = page.get("subscriptions") or []
    print(f"stream subscriptions being delivered: {len(subs)}", flush=True)
    for s in subs:
        print(f"  {s['kind']} {s['provider']}/{s['stream']} ({s['subscription']}) lag "
              f"{s['lag']}{' FAILING' if s['failing'] else ''} from {s['agent_silo']}",
              flush=True)
    state = page.get("state")
    if state is None:
        print("state: not shown (the silo does not set grain_page_state)", flush=True)
        return
    for st in state:
        if st.get("json") is None:
            print(f"state {st['name']} ({st['source']}): "
                  f"{st.get('error') or 'never written'}", flush=True)
            continue
        cut = (f" [truncated: first {len(st['json'].encode())} of {st['bytes']} bytes]"
               if st["truncated"] else "")
        print(f"state {st['name']} ({st['source']}){cut}:\n{st['json']}", flush=True)


def run_top(args: argparse.Namespace) -> int:
    """Handle ``orleanspy grains top``."""
    if args.interval < 0 or args.limit < 1:
        error("--interval must be >= 0 seconds and --limit >= 1")
        return EXIT_USAGE
    options = cluster_options(args, "grains top")
    if isinstance(options, int):
        return options
    configure_logging("console", "error")
    return asyncio.run(_top(options, args.interval, args.limit, args.timeout, args.json))


async def _read_calls(options: SiloOptions, entries: list[Any],
                      timeout: float) -> dict[str, dict[str, Any]]:
    """Each answering silo's call statistics, by silo."""
    answers = await ask_silos(options, entries, "calls", timeout)
    if refusals(answers):
        raise ConfigurationError("the silos refused this tool (see above)")
    return {a["silo"]: a["types"] for a in answers
            if isinstance(a, dict) and isinstance(a.get("silo"), str)
            and is_snapshot(a.get("types"))}


async def _top(options: SiloOptions, interval: float, limit: int, timeout: float,
               as_json: bool) -> int:
    live = await read_live_silos(options)
    if isinstance(live, int):
        return live
    first = await _read_calls(options, live, timeout)
    earlier = None
    now = first
    if interval > 0:
        await asyncio.sleep(interval)
        now = await _read_calls(options, live, timeout)
        # Only silos that answered both times: a silo's figures are its own since it started.
        earlier = merge([first[s] for s in now if s in first])
        now = {s: v for s, v in now.items() if s in first}
    rows = [f for f in figures(merge(list(now.values())), earlier) if f.calls > 0]
    rows.sort(key=lambda f: (-f.calls, f.type_name, f.method))
    rows = rows[:limit]
    per = interval if interval > 0 else None
    if as_json:
        print(json.dumps([_row(f, per) for f in rows]), flush=True)
        return EXIT_OK
    if not rows:
        print("no grain calls" + (f" in the last {interval:g} s" if per else ""), flush=True)
        return EXIT_OK
    header = ("TYPE", "METHOD", "CALLS/S" if per else "CALLS", "ERRORS", "P50", "P99", "MEAN")
    print_table([header, *(
        (f.type_name, method_label(f.method), f"{f.calls / per:.1f}" if per else str(f.calls),
         str(f.errors), _ms(f.p50), _ms(f.p99), _ms(f.mean))
        for f in rows)])
    return EXIT_OK


def _row(f: MethodFigures, per: float | None) -> dict[str, Any]:
    return {"type": f.type_name, "method": method_label(f.method), "calls": f.calls,
            "calls_per_second": f.calls / per if per else None, "errors": f.errors,
            "p50_seconds": f.p50, "p99_seconds": f.p99, "mean_seconds": f.mean}


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1000:.3f}ms" if seconds < 0.01 else f"{seconds * 1000:.1f}ms"
