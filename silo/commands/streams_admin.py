"""The stream operator commands: ``orleanspy streams subscriptions`` and ``streams
unsubscribe`` (the subscription manager, asked of one live silo) and ``streams agents
stop|start|status`` (asked of every active silo). A tool presents the client secret, as
``streams status`` does (docs/security.md)."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from orleanspy import ConfigurationError, SiloOptions
from orleanspy.cluster.transport import query_silo
from orleanspy.errors import MessageRejectedError, SiloUnavailableError
from silo.commands.cluster_status import add_arguments, cluster_options, read_live_silos
from silo.commands.common import (
    EXIT_CALL_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    error,
    error_text,
    parse_key,
    print_table,
)
from silo.startup import configure_logging

__all__ = ["add_subcommands"]

_SUBSCRIPTIONS_EPILOG = """\
Columns: ID (the subscription id; an implicit one is implicit:GRAIN_TYPE), CONSUMER (the
consuming grain, type/key; a client's is orleanspy.ClientStreamConsumer/CLIENT_ID), KIND
(implicit: from a grain class's @implicit_subscription; explicit: a subscribe call), FILTER,
NEXT (the queue sequence of the next event it is to take; "-" caught up or not known), LAG
(queue positions behind the newest event read; "-" when no agent delivers the stream now),
FAULTED. Implicit subscriptions are those of the grain classes the answering silo hosts.
--json prints one JSON list instead.
Exit codes: 0 ok; 1 the silo refused (no such provider); 2 bad arguments, the membership
table cannot be read, or no silo answers.

Example:
  orleanspy streams subscriptions events clicks alice --membership sqlite:cluster.db
"""

_UNSUBSCRIBE_EPILOG = """\
Removes one explicit subscription from its stream's rendezvous: its deliveries stop (one
under way may finish); a client's subscription is also forgotten by its client. An
implicit subscription cannot be removed (it follows from a grain class).
Exit codes: 0 removed; 1 refused (implicit, or no such subscription on that stream: the
error lists the stream's subscriptions); 2 bad arguments, or no silo answers.

Example:
  orleanspy streams unsubscribe events clicks alice 3f2a9c... --membership sqlite:cluster.db
"""

_AGENTS_EPILOG = """\
stop: every active silo stops its pulling agents of PROVIDER. Each agent first delivers what
it cached (up to the provider's handoff_timeout) and acknowledges; the silo keeps its queues
and their leases, so nothing reads them and published events wait in the queue. start:
each silo starts an agent for each queue again, reading from the acknowledgement, so
nothing published meanwhile is lost. status: each silo's state and queues.
Columns: SILO, STATE (running or stopped), QUEUES. The state is each silo's, in memory: a
silo that starts (or restarts) later pulls; run the command again after scaling.
Exit codes: 0 every active silo answered; 1 one did not or refused (it is listed);
2 bad arguments or the membership table cannot be read.

Example:
  orleanspy streams agents stop events --membership sqlite:cluster.db
"""


def add_subcommands(sub: Any) -> None:
    """Register ``subscriptions``, ``unsubscribe`` and ``agents`` under ``streams``."""
    fmt = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser(
        "subscriptions", help="list the subscriptions of a stream",
        description="List the subscriptions of the stream (PROVIDER, NS, KEY): implicit and "
        "explicit, with consumer, filter and lag.", epilog=_SUBSCRIPTIONS_EPILOG,
        formatter_class=fmt)
    _stream_arguments(p)
    add_arguments(p)
    p.set_defaults(handler=_run_subscriptions)

    p = sub.add_parser(
        "unsubscribe", help="remove an explicit subscription of a stream",
        description="Remove the explicit subscription ID of the stream (PROVIDER, NS, KEY).",
        epilog=_UNSUBSCRIBE_EPILOG, formatter_class=fmt)
    _stream_arguments(p)
    p.add_argument("sub_id", metavar="ID", help="the subscription id (from `subscriptions`)")
    add_arguments(p)
    p.set_defaults(handler=_run_unsubscribe)

    p = sub.add_parser(
        "agents", help="stop, start or show a provider's pulling agents on every silo",
        description="Stop, start or show the pulling agents of PROVIDER on every active "
        "silo.", epilog=_AGENTS_EPILOG, formatter_class=fmt)
    p.add_argument("command", choices=("stop", "start", "status"), metavar="stop|start|status",
                   help="stop pulling, start pulling again, or show each silo's state")
    p.add_argument("provider", metavar="PROVIDER", help="stream provider name")
    add_arguments(p, timeout=30.0)  # a stop first delivers what is cached (handoff_timeout)
    p.set_defaults(handler=_run_agents)


def _stream_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("provider", metavar="PROVIDER", help="stream provider name")
    p.add_argument("namespace", metavar="NS", help="stream namespace")
    p.add_argument("key", metavar="KEY", help="stream key")
    p.add_argument("--key-type", choices=("auto", "str", "int", "uuid"), default="auto",
                   help="type of KEY (default: auto, an int if it looks like one, else a str)")


def _stream_of(args: argparse.Namespace) -> list[Any]:
    try:
        key = parse_key(args.key, args.key_type)
    except ValueError:
        raise ConfigurationError(f"KEY {args.key!r} is not a valid {args.key_type}") from None
    return [args.provider, args.namespace, key]


def _run_subscriptions(args: argparse.Namespace) -> int:
    options = cluster_options(args, "streams subscriptions")
    if isinstance(options, int):
        return options
    stream = _stream_of(args)
    configure_logging("console", "error")
    return asyncio.run(_subscriptions(options, stream, args.timeout, args.json))


def _run_unsubscribe(args: argparse.Namespace) -> int:
    options = cluster_options(args, "streams unsubscribe")
    if isinstance(options, int):
        return options
    stream = _stream_of(args)
    configure_logging("console", "error")
    return asyncio.run(_unsubscribe(options, [*stream, args.sub_id], args.timeout))


def _run_agents(args: argparse.Namespace) -> int:
    options = cluster_options(args, f"streams agents {args.command}")
    if isinstance(options, int):
        return options
    configure_logging("console", "error")
    return asyncio.run(_agents(options, args.provider, args.command, args.timeout, args.json))


async def _ask_one(options: SiloOptions, op: str, args: list[Any], timeout: float) -> Any:
    """The answer of the first active silo that answers ``op``; raises the error of a silo
    that refused it; an int (exit code) when none answers."""
    silos = await read_live_silos(options)
    if isinstance(silos, int):
        return silos
    last = "none is active"
    for entry in silos:
        try:
            return await query_silo(entry.silo.host, entry.silo.port, op, args,
                                    cluster_id=options.cluster_id, secret=options.secret,
                                    timeout=timeout)
        except (OSError, TimeoutError, SiloUnavailableError) as exc:
            last = f"{entry.silo}: {error_text(exc)}"
    error(f"no silo of cluster {options.cluster_id} in {options.membership} answers "
          f"(last: {last})")
    return EXIT_USAGE


async def _subscriptions(options: SiloOptions, stream: list[Any], timeout: float,
                         as_json: bool) -> int:
    try:
        rows = await _ask_one(options, "stream_subscriptions", stream, timeout)
    except Exception as exc:
        error(error_text(exc))
        return EXIT_CALL_FAILED
    if isinstance(rows, int):
        return rows
    if as_json:
        print(json.dumps(rows), flush=True)
        return EXIT_OK
    if not rows:
        print(f"stream {'/'.join(map(str, stream))} has no subscriptions", flush=True)
        return EXIT_OK
    print_table([("ID", "CONSUMER", "KIND", "FILTER", "NEXT", "LAG", "FAULTED"), *(
        (r["sub_id"], r["consumer"], r["kind"], r["filter"] or "-",
         "-" if r["next"] is None else str(r["next"]), "-" if r["lag"] is None else str(r["lag"]),
         "yes" if r["faulted"] else "no")
        for r in rows
    )])
    return EXIT_OK


async def _unsubscribe(options: SiloOptions, args: list[Any], timeout: float) -> int:
    try:
        done = await _ask_one(options, "stream_unsubscribe", args, timeout)
    except Exception as exc:
        error(error_text(exc))
        return EXIT_CALL_FAILED
    if isinstance(done, int):
        return done
    print(f"removed subscription {args[3]} of {'/'.join(map(str, args[:3]))}", flush=True)
    return EXIT_OK


async def _agents(options: SiloOptions, provider: str, command: str, timeout: float,
                  as_json: bool) -> int:
    silos = await read_live_silos(options)
    if isinstance(silos, int):
        return silos

    async def ask(entry: Any) -> dict[str, Any]:
        try:
            answer: dict[str, Any] = await query_silo(
                entry.silo.host, entry.silo.port, "stream_agents", [provider, command],
                cluster_id=options.cluster_id, secret=options.secret, timeout=timeout)
            return answer
        except MessageRejectedError as exc:
            return {"silo": str(entry.silo), "state": "refused", "queues": [],
                    "error": str(exc)}
        except Exception as exc:
            return {"silo": str(entry.silo), "state": "no answer", "queues": [],
                    "error": error_text(exc)}

    rows = sorted(await asyncio.gather(*(ask(e) for e in silos)), key=lambda r: r["silo"])
    failed = [r for r in rows if "error" in r]
    if as_json:
        print(json.dumps(rows), flush=True)
    elif not rows:
        print(f"cluster {options.cluster_id} has no active silo", flush=True)
    else:
        print_table([("SILO", "STATE", "QUEUES"), *(
            (r["silo"], r["state"], ", ".join(r["queues"]) or "-") for r in rows)])
    for r in failed:
        error(f"silo {r['silo']}: {r['error']}")
    return EXIT_CALL_FAILED if failed else EXIT_OK
