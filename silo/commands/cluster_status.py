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
from orleanspy.cluster.membership import MembershipEntry, SiloStatus
from orleanspy.cluster.membership.options import MembershipOptions
from orleanspy.cluster.query import SiloRefusedError
from orleanspy.cluster.transport import query_silo
from orleanspy.errors import MembershipError, MessageRejectedError
from orleanspy.hosting.builder import open_membership_table, queue_lease_store
from orleanspy.runtime.options import BACKENDS_OF
from silo.commands.common import CLI_DEFAULTS, EXIT_OK, EXIT_USAGE, error, print_table, usage
from silo.config import find_config_file, load_config
from silo.dashboard.health import silo_health, unowned_queues, warnings
from silo.dashboard.view import queue_rows, subscription_order
from silo.startup import configure_logging

__all__ = [
    "add_arguments", "add_parser", "ask_silos", "cluster_options", "read_membership",
    "refusals",
]

_EPILOG = """\
Columns: SILO (host:port@generation), STATUS (joining, active, shutting_down, stopped: it
left gracefully, dead: the others declared it dead), UPTIME (now minus the start time in the
table), LAST SEEN (its last I-am-alive in the table), ACTIVATIONS and QUEUES (asked of the
silo itself; "-" if it does not answer), GATEWAY (client port), NOTE (why a row is not an
active silo that answers, and since when: stopped gracefully, declared dead by whom, joining,
shutting down, did not answer, refused this tool; who suspects it; the queues it held last
that no silo pulls now). Warnings follow the table: one line per unowned queue (how
long, last holder) and per suspected or silent silo. Then the stream subscriptions that are
behind or failing, one row per (stream, subscription): the silo that pulls its queue, LAG
(queue positions not yet delivered to it), AGE (of its oldest undelivered event) and FAILING
(attempts of the delivery that fails now); failing first, then furthest behind, the first
10 (`orleanspy streams status` lists every one). Rows of stopped and dead silos are
deleted once older than defunct_silo_expiration (7 days).
--json prints one JSON list of silo rows instead (with why, last_seen, declared_dead_at,
declared_dead_by, suspected_by, reachable, unowned_queues, and behind: the subscriptions of
the queues it pulls that are behind or failing, in the order above).
Exit codes: 0 ok; 2 the membership table cannot be read, a silo refused the secret, or the
arguments are wrong.

Example:
  orleanspy cluster status --membership sqlite:cluster.db --cluster-id prod
"""


_NO_CONFIG = "none found: --config, $ORLEANSPY_CONFIG or ./orleanspy.toml"


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
    config = load_config(find_config_file(args.config), flags, defaults=CLI_DEFAULTS,
                         flag_names={"membership": "--membership", "data_dir": "--data-dir"})
    options = config.options
    if options.membership is None:
        raise ConfigurationError(
            f"{command} needs the membership table: pass --membership URL (the silos' "
            "--membership), set ORLEANSPY_MEMBERSHIP, or set membership in the config file "
            f"({config.config_file or _NO_CONFIG})"
        )
    parsed = parse_backend_url(options.membership, key="membership", data_dir=options.data_dir,
                               allow=BACKENDS_OF["membership"])
    if parsed.scheme == "sqlite" and not os.path.isfile(parsed.path):
        source = config.sources["membership"]
        if source.startswith("flag"):
            source += f"; a relative path is relative to the data dir {options.data_dir}"
        elif config.config_file is not None and source.startswith(str(config.config_file)):
            source += "; a relative path is relative to the file's folder"
        error(f"no membership table at {parsed.path} (membership = {options.membership}, "
              f"from {source}): give the file the silos use")
        return EXIT_USAGE  # and do not create an empty one
    return options


async def _cluster_status(options: SiloOptions, timeout: float, as_json: bool) -> int:
    data = await read_membership(options)
    if isinstance(data, int):
        return data
    now = time.time()
    entries = sorted(data.entries(), key=lambda e: (e.silo.host, e.silo.port,
                                                     e.silo.generation))
    answers, streams, leases = await asyncio.gather(
        ask_silos(options, entries, "status", timeout),
        ask_silos(options, entries, "streams", timeout), read_leases(options))
    expiration = MembershipOptions().death_vote_expiration_timeout
    rows: list[dict[str, Any]] = []
    all_queues: dict[str, set[str]] = {}
    owned: set[tuple[str, str]] = set()
    for entry, answer, pulled in zip(entries, answers, streams, strict=True):
        live = not entry.status.is_gone
        told = answer if isinstance(answer, dict) else None
        for provider, names in ((told or {}).get("all_queues") or {}).items():
            all_queues.setdefault(provider, set()).update(names)
        for provider, names in ((told or {}).get("queues") or {}).items():
            owned.update((provider, name) for name in names)
        rows.append({
            **silo_health(entry, now, expiration),
            "uptime": round(now - entry.start_time, 1) if live else None,
            "activations": told["activations"] if told else None,
            "queues": told["queues"] if told else None,
            "gateway": (f"{entry.silo.host}:{entry.gateway_port}"
                        if entry.gateway_port else None),
            "reachable": told is not None,
            "why": why(entry, answer, entries, now),
            "behind": behind(pulled),
        })
    unowned = unowned_queues(all_queues, owned, leases, {r["silo"]: r for r in rows}, now)
    for row in rows:
        row["unowned_queues"] = [f"{q['provider']}/{q['queue']}" for q in unowned
                                 if q["last_owner"] == row["silo"]]
    refused = refusals(answers)
    if as_json:
        print(json.dumps(rows), flush=True)
    else:
        print(f"cluster {options.cluster_id}: {sum(r['status'] == 'active' for r in rows)} "
              f"active, {len(rows)} in the table (version {data.version.version})")
        _print_table(rows)
        for line in warnings(rows, unowned):
            print(f"warning: {line}", flush=True)
        _print_behind(rows)
    return EXIT_USAGE if refused else EXIT_OK


def refusals(answers: list[Any]) -> bool:
    """Print one error line per reason the silos refused this tool's handshake (a wrong or
    missing secret, say) with the fix; True if any refused."""
    reasons = sorted({a.reason for a in answers if isinstance(a, SiloRefusedError)})
    for reason in reasons:
        silos = [a.address for a in answers
                 if isinstance(a, SiloRefusedError) and a.reason == reason]
        error(f"silo {', '.join(silos)} refused this tool: {reason}; pass the silos' "
              "secret with --secret, ORLEANSPY_SECRET or secret in orleanspy.toml"
              if "secret" in reason else f"silo {', '.join(silos)} refused this tool: {reason}")
    return bool(reasons)


def _when(now: float, then: float) -> str:
    ago = max(0.0, now - then)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(then))
    if ago < 120:
        return f"{stamp} ({ago:.0f}s ago)"
    if ago < 7200:
        return f"{stamp} ({ago / 60:.0f}min ago)"
    return f"{stamp} ({ago / 3600:.1f}h ago)"


def why(entry: MembershipEntry, answer: Any, entries: list[MembershipEntry],
        now: float) -> str | None:
    """Why a row is not an active silo that answers, and since when (None: it is one). A
    dead row names the silos that declared it dead and when, as the row records them (a
    newer generation of its endpoint is its restart); a row without that record, by the
    votes against it."""
    status = entry.status
    last = entry.i_am_alive_time
    if status is SiloStatus.STOPPED:
        return f"stopped gracefully at {_when(now, last)}"
    if status is SiloStatus.DEAD:
        here = (entry.silo.host, entry.silo.port)
        by = entry.declared_dead_by
        if by and entry.declared_dead_at:
            at = _when(now, entry.declared_dead_at)
            if all((s.host, s.port) == here and s.generation > entry.silo.generation
                   for s in by):
                return f"replaced by its restart {by[0]} at {at}; last alive {_when(now, last)}"
            voters = ", ".join(str(s) for s in by)
            return f"declared dead by {voters} at {at}; last alive {_when(now, last)}"
        newer = [e for e in entries if (e.silo.host, e.silo.port) == here
                 and e.silo.generation > entry.silo.generation]
        if entry.suspect_votes:
            voters = ", ".join(sorted({str(v.voter) for v in entry.suspect_votes}))
            stamp = _when(now, max(v.time for v in entry.suspect_votes))
            return f"declared dead by {voters} at {stamp}; last alive {_when(now, last)}"
        if newer:
            return f"replaced by its restart {newer[0].silo}; last alive {_when(now, last)}"
        return f"declared dead; last alive {_when(now, last)}"
    if status is SiloStatus.JOINING:
        return f"joining since {_when(now, entry.start_time)}"
    if status is SiloStatus.SHUTTING_DOWN:
        return f"shutting down since {_when(now, last)}"
    if isinstance(answer, SiloRefusedError):
        return f"refused this tool: {answer.reason}"
    if isinstance(answer, MessageRejectedError):
        return f"refused the request: {answer}"
    if answer is None:
        return f"did not answer; last alive {_when(now, last)}"
    return None


async def read_leases(options: SiloOptions) -> dict[str, Any]:
    """The stream-queue leases kept with the membership table (queue -> ``Lease``); empty
    when they cannot be read (the table's rows are still shown)."""
    assert options.membership is not None
    table = open_membership_table(options.membership, options.cluster_id, options.data_dir)
    store = queue_lease_store(table)
    try:
        leases: dict[str, Any] = await store.read_all()
        return leases
    except Exception:
        return {}
    finally:
        await store.close()
        await table.close()


async def ask_silos(options: SiloOptions, entries: list[Any], op: str,
                    timeout: float, args: list[Any] | None = None) -> list[Any]:
    """Each live silo's answer to the read-only control request ``op`` (None for a stopped,
    dead or silent one; the error itself for a request or a handshake the silo refused:
    ``MessageRejectedError``, ``SiloRefusedError``), asked at once."""

    async def ask(entry: Any) -> Any:
        if entry.status.is_gone:
            return None
        try:
            return await query_silo(entry.silo.host, entry.silo.port, op, list(args or []),
                                    cluster_id=options.cluster_id, secret=options.secret,
                                    timeout=timeout)
        except (MessageRejectedError, SiloRefusedError) as exc:
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


#: subscriptions behind that the table lists (``streams status`` lists every one)
BEHIND_SHOWN = 10


def behind(streams: Any) -> list[dict[str, Any]]:
    """The subscriptions of a silo's ``streams`` answer that are behind or failing: failing
    first, then furthest behind (none if the silo did not answer)."""
    if not isinstance(streams, dict):
        return []
    subs = [{"provider": r["provider"], "queue": r["queue"], **sub}
            for r in queue_rows(streams) for sub in r["subs"] if sub["lag"] or sub["failing"]]
    return sorted(subs, key=subscription_order)


def _print_behind(rows: list[dict[str, Any]]) -> None:
    subs = sorted(({"silo": r["silo"], **sub} for r in rows for sub in r["behind"]),
                  key=subscription_order)
    if not subs:
        return
    print(flush=True)
    print_table([("SILO", "PROVIDER", "QUEUE", "STREAM", "CONSUMER", "LAG", "AGE", "FAILING"),
                 *((s["silo"], s["provider"], s["queue"], s["stream"], s["consumer"],
                    str(s["lag"]), "-" if s["age"] is None else f"{s['age']:.1f}s",
                    str(s["failing"])) for s in subs[:BEHIND_SHOWN])])
    if len(subs) > BEHIND_SHOWN:
        print(f"... and {len(subs) - BEHIND_SHOWN} more behind: orleanspy streams status",
              flush=True)


def _print_table(rows: list[dict[str, Any]]) -> None:
    header = ("SILO", "STATUS", "UPTIME", "LAST SEEN", "ACTIVATIONS", "QUEUES", "GATEWAY",
              "NOTE")
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
            "-" if r["last_seen_ago"] is None else f"{r['last_seen_ago']:.0f}s ago",
            "-" if r["activations"] is None else str(r["activations"]),
            queue_text, r["gateway"] or "-", _note(r),
        ))
    print_table(lines)


def _note(row: dict[str, Any]) -> str:
    """Why a row needs a look: why it is not an active silo that answers (stopped, declared
    dead, joining, silent, refusing), who suspects it, queues it held that nobody pulls."""
    notes = [row["why"]] if row["why"] else []
    if row["suspected_by"]:
        notes.append(f"suspected by {', '.join(row['suspected_by'])}")
    if row["unowned_queues"]:
        notes.append(f"unowned: {', '.join(row['unowned_queues'])}")
    return "; ".join(notes) or "-"
