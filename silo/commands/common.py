"""What the ``orleanspy`` commands share: exit codes, the client argument block of ``call``
and ``spark run``, grain key and argument parsing, JSON rendering of results, the gateway
connection."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import decimal
import enum
import json
import os
import re
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

from orleanspy import (
    ClientOptions,
    ClusterClient,
    ConfigurationError,
    RemoteGrainError,
    SiloUnavailableError,
)
from orleanspy._util.urls import anchor_sqlite
from orleanspy.client.discovery import GatewayDiscovery
from orleanspy.grains.proxy import GrainProxy
from orleanspy.logging import get_logger
from silo.config import find_config_file, load_config

__all__ = [
    "CLI_DEFAULTS",
    "EXIT_CALL_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "ClientSettings",
    "GatewayUnreachable",
    "add_client_arguments",
    "client_settings",
    "connect",
    "error",
    "error_text",
    "parse_arg",
    "parse_key",
    "print_table",
    "put_cwd_on_path",
    "render",
    "usage",
]

EXIT_OK: Final = 0
EXIT_CALL_FAILED: Final = 1
EXIT_USAGE: Final = 2

CLI_DEFAULTS: Final = {
    "storage": "sqlite:orleanspy.db",
    "reminders": "sqlite:orleanspy.db",
    "data_dir": ".orleanspy",
}
"""Host defaults of ``silo start``: durable, embedded SQLite in the data dir (``Silo`` itself
defaults to memory)."""

_INT = re.compile(r"[+-]?\d+")


def usage(parser: argparse.ArgumentParser) -> int:
    """Print ``parser``'s help on stderr; the exit code of a command given without its
    subcommand."""
    parser.print_help(sys.stderr)
    return EXIT_USAGE


_FIGURE: Final = re.compile(r"^-?[\d.,]+(ms|s|%|/[\d.,]+!?)?$|^-$")


def print_table(lines: Sequence[Sequence[str]]) -> None:
    """Print rows of text cells (the first is the header) in columns two spaces apart, with
    rich: a bold header on a terminal, plain text in a pipe, never wrapped (one row, one
    line, for ``grep`` and ``awk``)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, show_edge=False, pad_edge=False, padding=(0, 2, 0, 0),
                  header_style="bold", show_header=True)
    for i, name in enumerate(lines[0]):
        numeric = all(_FIGURE.match(line[i]) for line in lines[1:]) and len(lines) > 1
        table.add_column(name, no_wrap=True,
                         justify="right" if numeric else "left")
    for line in lines[1:]:
        table.add_row(*line)
    console = Console(soft_wrap=True, width=sys.maxsize if not sys.stdout.isatty() else None,
                      highlight=False, markup=False, emoji=False)
    with console.capture() as capture:
        console.print(table)
    out = "\n".join(row.rstrip() for row in capture.get().splitlines())
    print(out, flush=True)


def error(message: str) -> None:
    """One ``error: ...`` line on stderr."""
    print(f"error: {message}", file=sys.stderr, flush=True)


def put_cwd_on_path() -> None:
    """Put the working directory on ``sys.path`` so application modules import."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def add_client_arguments(
    p: argparse.ArgumentParser, *, timeout: float, grain_help: str, method_help: str
) -> None:
    """The arguments of a command that calls one grain method through a gateway."""
    p.add_argument("--gateway", metavar="HOST:PORT", action="append",
                   help="gateway to connect to; repeat it to name several gateways of a "
                   "cluster: the call goes through one that answers (default: the gateways "
                   "of the active silos in the membership table, if one is configured; else "
                   "host and gateway_port from the environment and config file, else "
                   "127.0.0.1:30000)")
    p.add_argument("--membership", metavar="URL",
                   help="membership table to find the gateways in: sqlite:PATH, "
                   "redis://HOST:PORT/DB?prefix=P or postgresql://USER@HOST:PORT/DB?schema=S "
                   "(default: ORLEANSPY_MEMBERSHIP, else membership in the config file)")
    p.add_argument("--config", metavar="FILE",
                   help="TOML config file to take cluster_id, secret, membership and gateway "
                   "from (default: $ORLEANSPY_CONFIG, else ./orleanspy.toml if present)")
    p.add_argument("--cluster-id", help="cluster id (default: dev)")
    p.add_argument("--secret", help="shared secret of the silo, if it has one")
    p.add_argument("--timeout", type=float, default=timeout, metavar="SECONDS",
                   help=f"response timeout of the call (default: {timeout:g})")
    p.add_argument("--key-type", choices=("auto", "str", "int", "uuid"), default="auto",
                   help="type of KEY (default: auto, an int if it looks like one, else a str)")
    p.add_argument("grain_type", metavar="GRAIN_TYPE", help=grain_help)
    p.add_argument("key", metavar="KEY", help="grain key")
    p.add_argument("method", metavar="METHOD", help=method_help)
    p.add_argument("args", nargs="*", metavar="ARGS", help="arguments (JSON or plain strings)")


@dataclasses.dataclass(frozen=True, slots=True)
class ClientSettings:
    """The parsed client argument block: where to connect and what to call."""

    gateways: tuple[str, ...]
    #: Where the gateways come from, for errors: a flag, a setting's source, the table.
    source: str
    #: The membership table whose active silos' gateways to use (``gateways`` is empty).
    membership: str | None
    cluster_id: str
    secret: str | None
    timeout: float
    grain_type: str
    key: str | int | uuid.UUID
    method: str
    args: list[Any]


def client_settings(args: argparse.Namespace) -> ClientSettings:
    """The client block of ``args``: flags, then ``ORLEANSPY_*`` environment variables, then
    the config file (as ``silo start`` reads them). The gateways are the ``--gateway`` flags;
    else those of the active silos in the membership table, if one is configured; else
    ``host:gateway_port``.

    Raises:
        ConfigurationError: KEY does not parse as ``--key-type``, or the config is invalid.
    """
    membership_flag = getattr(args, "membership", None)
    if membership_flag is not None:  # a relative SQLite path names a file here
        membership_flag = anchor_sqlite(membership_flag, os.getcwd())
    flags = {"cluster_id": args.cluster_id, "secret": args.secret,
             "membership": membership_flag}
    config = load_config(find_config_file(args.config), flags,
                         flag_names={"membership": "--membership"})
    options = config.options
    gateways: list[str] = args.gateway or []
    membership: str | None = None
    if gateways:
        source = "--gateway"
    elif options.membership is not None and options.membership != "memory":
        membership = options.membership
        source = f"membership table {membership} (membership: {config.sources['membership']})"
    else:
        host = options.advertised_host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        gateways = [f"{host}:{options.gateway_port or 30000}"]
        source = f"gateway_port: {config.sources['gateway_port']}"
    try:
        key = parse_key(args.key, args.key_type)
    except ValueError:
        raise ConfigurationError(f"KEY {args.key!r} is not a valid {args.key_type}") from None
    return ClientSettings(
        gateways=tuple(gateways),
        source=source,
        membership=membership,
        cluster_id=args.cluster_id or options.cluster_id,
        secret=args.secret if args.secret is not None else options.secret,
        timeout=args.timeout,
        grain_type=args.grain_type,
        key=key,
        method=args.method,
        args=[parse_arg(a) for a in args.args],
    )


class GatewayUnreachable(Exception):
    """No gateway of the settings answered; the message says which were tried."""


@asynccontextmanager
async def connect(settings: ClientSettings) -> AsyncIterator[ClusterClient]:
    """A client connected to the first gateway of ``settings`` that answers.

    Raises:
        GatewayUnreachable: none answered (the command prints it and exits with 2).
    """
    gateways = settings.gateways
    if settings.membership is not None:
        discovery = GatewayDiscovery(settings.membership, settings.cluster_id,
                                     get_logger("silo.commands"))
        found = await discovery.gateways()
        if not found:
            raise GatewayUnreachable(
                f"no active silo with a gateway in cluster {settings.cluster_id!r} of "
                f"the {settings.source}" + (" (the table cannot be read)" if found is None else "")
                + ": start a silo, or name a gateway with --gateway")
        gateways = tuple(found)
    # One call needs one gateway: connect to the first that answers, not to all of them.
    client = ClusterClient(ClientOptions(
        gateways=gateways, cluster_id=settings.cluster_id, secret=settings.secret,
        response_timeout=settings.timeout, gateway_count=1,
    ))
    try:
        try:
            await client.connect()
        except SiloUnavailableError as exc:
            raise GatewayUnreachable(
                f"cannot reach the silo gateway at {', '.join(gateways)} ({settings.source}): "
                f"{exc}"
            ) from None
        yield client
    finally:
        await client.close()


def parse_arg(text: str) -> Any:
    """A command-line argument: its JSON value if it is valid JSON, else the string itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_key(text: str, key_type: str = "auto") -> str | int | uuid.UUID:
    """A grain key from the command line (raises ValueError for a bad int or UUID)."""
    if key_type == "int" or (key_type == "auto" and _INT.fullmatch(text)):
        return int(text)
    if key_type == "uuid":
        return uuid.UUID(text)
    return text


def _json_default(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (set, frozenset)):
        items = list(value)
        try:
            return sorted(items)
        except TypeError:
            return items
    if isinstance(value, (uuid.UUID, decimal.Decimal)):
        return str(value)
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, GrainProxy):
        return str(value.grain_id)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def render(value: Any) -> str:
    """A call result as JSON, or its repr if it is not JSON-compatible."""
    try:
        return json.dumps(value, default=_json_default, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def error_text(exc: BaseException) -> str:
    """``Type: message`` of a grain call's error."""
    if isinstance(exc, RemoteGrainError):  # a type not importable here: its remote name
        return f"{exc.type_name.rpartition('.')[2]}: {exc.message}"
    return f"{type(exc).__name__}: {exc}"
