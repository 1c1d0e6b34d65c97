"""The ``orleanspy`` command line: ``silo start`` hosts grains, ``call`` calls one,
``cluster status`` lists the silos of a cluster.

Exit codes: 0 success; 1 the grain call failed (or a forced/failed silo shutdown);
2 bad usage or configuration, or the gateway cannot be reached. Errors are one line on
stderr (``error: ...``), never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import decimal
import enum
import json
import os
import re
import sys
import uuid
from collections.abc import Sequence
from typing import Any, Final

from orleanspy import (
    ClusterClient,
    ConfigurationError,
    GrainReference,
    RemoteGrainError,
    Silo,
    SiloUnavailableError,
)
from silo.config import find_config_file, load_config
from silo.startup import configure_logging, run_silo

__all__ = ["CLI_DEFAULTS", "main", "parse_arg", "parse_key"]

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

# option field -> flag, for the flags not spelled --<field-name>
_FLAG_NAMES: Final = {"collection_age": "--idle-age", "minimum_reminder_period":
                      "--min-reminder-period", "app": "--app"}
_INT = re.compile(r"[+-]?\d+")

_DESCRIPTION = """\
orleanspy: virtual actors (grains) on asyncio.

  orleanspy silo start --app myapp.grains      host the grains of a module
  orleanspy silo start --app myapp.grains --membership sqlite:cluster.db --port 0
                                               join a cluster (several processes)
  orleanspy cluster status --membership sqlite:cluster.db
                                               list the silos of a cluster
  orleanspy call Counter alice increment 5     call a grain through a gateway
  orleanspy spark run Stats day report         run a Spark grain's job with a progress bar
"""

_START_EPILOG = """\
Configuration precedence: defaults < TOML file < ORLEANSPY_<FIELD> environment variables
< flags. The TOML file (--config, $ORLEANSPY_CONFIG, or ./orleanspy.toml if present) holds
SiloOptions field names at the top level or in a [silo] table, and app = ["module", ...];
its relative data_dir resolves against the file's folder. Example:

  app = ["myapp.grains"]
  [silo]
  cluster_id = "prod"
  gateway_port = 30000
  secret = "change-me"

Cluster: silos started with the same --cluster-id and --membership form one cluster
(--membership sqlite:PATH for processes of one machine; give each a free --port, or 0).
Without --membership the silo runs alone and opens no silo-to-silo port.

Once serving, the silo prints one line to stdout:
  orleanspy silo ready gateway=HOST:PORT
(a clustered silo first prints "orleanspy silo cluster silo=HOST:PORT@GENERATION").
Logs go to stderr. SIGINT/SIGTERM stop it gracefully (changed grain state is written);
a second signal exits at once with code 1.
"""

_STATUS_EPILOG = """\
Columns: SILO (host:port@generation), STATUS (joining, active, shutting_down, dead), UPTIME
(now minus the start time in the table), ACTIVATIONS and QUEUES (asked of the silo itself;
"-" if it does not answer), GATEWAY (client port). --json prints one JSON list instead.
Exit codes: 0 ok; 2 the membership table cannot be read or the arguments are wrong.

Example:
  orleanspy cluster status --membership sqlite:cluster.db --cluster-id prod
"""

_CALL_EPILOG = """\
ARGS are JSON when they parse as JSON (5, "5", [1,2], {"a":1}, true, null), else plain
strings. KEY is an int if it looks like one, else a string (--key-type forces a type).
The result is printed as JSON (or its repr if it is not JSON-compatible).
Exit codes: 0 ok; 1 the grain raised (stderr: "error: Type: message"); 2 the gateway is
unreachable, refused the handshake, or the arguments are wrong.

Example:
  orleanspy call --gateway 127.0.0.1:30000 Counter alice increment 5
  orleanspy call --gateway 127.0.0.1:30000 --gateway 127.0.0.1:30001 Counter alice get
"""


def _build_parser() -> argparse.ArgumentParser:
    from orleanspy import __version__

    parser = argparse.ArgumentParser(
        prog="orleanspy", description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(handler=lambda _: _usage(parser))
    parser.add_argument("--version", action="version", version=f"orleanspy {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    silo = commands.add_parser(
        "silo", help="run and manage silos", description="Run and manage silo processes.",
    )
    silo.set_defaults(handler=lambda _: _usage(silo))
    silo_commands = silo.add_subparsers(dest="silo_command", metavar="SUBCOMMAND")
    start = silo_commands.add_parser(
        "start", help="start a silo hosting the grains of --app modules",
        description="Start a silo that hosts the Grain subclasses defined in the --app "
        "modules, with embedded SQLite storage and reminders in --data-dir.",
        epilog=_START_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_start_arguments(start)
    start.set_defaults(handler=_cmd_silo_start)

    cluster = commands.add_parser(
        "cluster", help="inspect a cluster", description="Inspect a cluster of silos.",
    )
    cluster.set_defaults(handler=lambda _: _usage(cluster))
    cluster_commands = cluster.add_subparsers(dest="cluster_command", metavar="SUBCOMMAND")
    status = cluster_commands.add_parser(
        "status", help="list the silos of a cluster",
        description="Read the membership table and list every silo: status, address, "
        "uptime (from the table), and, for each silo that answers on its silo port, its "
        "activation count and the stream queues it owns.",
        epilog=_STATUS_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_status_arguments(status)
    status.set_defaults(handler=_cmd_cluster_status)

    call = commands.add_parser(
        "call", help="call a grain method through a silo gateway",
        description="Call one grain method through a silo's gateway and print the result.",
        epilog=_CALL_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_call_arguments(call)
    call.set_defaults(handler=_cmd_call)

    from silo.spark_cli import SPARK_RUN_EPILOG, add_spark_arguments

    spark = commands.add_parser(
        "spark", help="run Spark grain jobs", description="Spark analytics grains.",
    )
    spark.set_defaults(handler=lambda _: _usage(spark))
    spark_commands = spark.add_subparsers(dest="spark_command", metavar="SUBCOMMAND")
    spark_run = spark_commands.add_parser(
        "run", help="call a Spark grain's method, showing its job's progress",
        description="Call a SparkGrain method through a gateway; draw the progress of its "
        "Spark job on stderr and print the result as JSON.",
        epilog=SPARK_RUN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_spark_arguments(spark_run)
    spark_run.set_defaults(handler=_cmd_spark_run)
    return parser


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def _add_start_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--app", action="append", metavar="MODULE",
                   help="module whose Grain subclasses to host (repeatable); imported with "
                   "the working directory on sys.path")
    p.add_argument("--config", metavar="FILE",
                   help="TOML config file (default: $ORLEANSPY_CONFIG or ./orleanspy.toml)")
    p.add_argument("--cluster-id", help="cluster id clients must name (default: dev)")
    p.add_argument("--host", help="address to listen on (default: 127.0.0.1)")
    p.add_argument("--port", type=int, help="silo-to-silo port (default: 11111)")
    p.add_argument("--gateway-port", type=int,
                   help="client gateway port; 0 picks a free one (default: 30000)")
    p.add_argument("--secret", help="shared secret clients must present (default: none)")
    p.add_argument("--storage", metavar="URL",
                   help="grain storage: memory or sqlite:PATH, relative to --data-dir "
                   "(default: sqlite:orleanspy.db)")
    p.add_argument("--reminders", metavar="URL",
                   help="reminder table: memory or sqlite:PATH (default: sqlite:orleanspy.db)")
    p.add_argument("--data-dir", metavar="DIR",
                   help="folder of the SQLite files (default: .orleanspy)")
    p.add_argument("--idle-age", type=float, metavar="SECONDS",
                   help="deactivate grains idle this long (collection_age; default: 900)")
    p.add_argument("--min-reminder-period", type=float, metavar="SECONDS",
                   help="smallest reminder period allowed (default: 60)")
    p.add_argument("--shutdown-timeout", type=float, metavar="SECONDS",
                   help="time a graceful stop may take per phase (default: 30)")
    p.add_argument("--log-format", choices=("console", "json"),
                   help="console (human; key=value when not a terminal) or json "
                   "(default: console)")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"),
                   help="lowest level logged (default: info)")
    p.add_argument("--membership", metavar="URL",
                   help="membership table of the cluster to join: sqlite:PATH (relative to "
                   "--data-dir) or memory; omit to run a lone silo (default: none)")
    p.add_argument("--probe-period", type=float, metavar="SECONDS",
                   help="time between failure-detection probes (default: 5)")
    p.add_argument("--probe-timeout", type=float, metavar="SECONDS",
                   help="a probe not answered by then failed (default: the probe period)")
    p.add_argument("--i-am-alive-period", type=float, metavar="SECONDS",
                   help="how often the silo writes its I-am-alive time (default: 30)")
    p.add_argument("--table-refresh-period", type=float, metavar="SECONDS",
                   help="how often the membership table is read (default: 10)")
    p.add_argument("--spark-master", metavar="URL",
                   help="Spark master of the silo's SparkSession: local[*] (default), "
                   "local[N], spark://HOST:PORT, yarn, k8s://...")
    p.add_argument("--spark-remote", metavar="URL",
                   help="Spark Connect server instead of an embedded driver: sc://HOST:PORT")
    p.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                   help="any spark.* setting (repeatable)")


def _add_status_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--membership", metavar="URL",
                   help="membership table: sqlite:PATH, relative to --data-dir (default: "
                   "from the config file)")
    p.add_argument("--config", metavar="FILE",
                   help="TOML config file to take membership, cluster_id, secret from")
    p.add_argument("--cluster-id", help="cluster id (default: dev)")
    p.add_argument("--secret", help="shared secret of the silos, if they have one")
    p.add_argument("--data-dir", metavar="DIR",
                   help="folder of relative SQLite paths (default: .orleanspy)")
    p.add_argument("--timeout", type=float, default=3.0, metavar="SECONDS",
                   help="how long to wait for each silo's answer (default: 3)")
    p.add_argument("--json", action="store_true", help="print one JSON list")


def _add_call_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gateway", metavar="HOST:PORT", action="append",
                   help="gateway to connect to; repeat it to name several gateways of a "
                   "cluster: the call goes through one that answers (default: host and "
                   "gateway_port from the config file and environment, else 127.0.0.1:30000)")
    p.add_argument("--config", metavar="FILE",
                   help="TOML config file to take cluster_id, secret and gateway from")
    p.add_argument("--cluster-id", help="cluster id (default: dev)")
    p.add_argument("--secret", help="shared secret of the silo, if it has one")
    p.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                   help="response timeout of the call (default: 30)")
    p.add_argument("--key-type", choices=("auto", "str", "int", "uuid"), default="auto",
                   help="type of KEY (default: auto, an int if it looks like one, else a str)")
    p.add_argument("grain_type", metavar="GRAIN_TYPE",
                   help="grain type name (the class name unless @grain_type renames it)")
    p.add_argument("key", metavar="KEY", help="grain key")
    p.add_argument("method", metavar="METHOD", help="method to call")
    p.add_argument("args", nargs="*", metavar="ARGS", help="arguments (JSON or plain strings)")


# -- helpers ---------------------------------------------------------------------------------
def _error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)


def _put_cwd_on_path() -> None:
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


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
    if isinstance(value, GrainReference):
        return str(value.grain_id)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _render(value: Any) -> str:
    try:
        return json.dumps(value, default=_json_default, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, RemoteGrainError):  # a type not importable here: its remote name
        return f"{exc.type_name.rpartition('.')[2]}: {exc.message}"
    return f"{type(exc).__name__}: {exc}"


# -- commands --------------------------------------------------------------------------------
def _cmd_silo_start(args: argparse.Namespace) -> int:
    flags = {
        "app": args.app,
        "cluster_id": args.cluster_id,
        "host": args.host,
        "port": args.port,
        "gateway_port": args.gateway_port,
        "secret": args.secret,
        "storage": args.storage,
        "reminders": args.reminders,
        "data_dir": args.data_dir,
        "collection_age": args.idle_age,
        "minimum_reminder_period": args.min_reminder_period,
        "shutdown_timeout": args.shutdown_timeout,
        "log_format": args.log_format,
        "log_level": args.log_level,
        "membership": args.membership,
        "probe_period": args.probe_period,
        "probe_timeout": args.probe_timeout,
        "i_am_alive_period": args.i_am_alive_period,
        "table_refresh_period": args.table_refresh_period,
    }
    config = load_config(
        find_config_file(args.config), flags, defaults=CLI_DEFAULTS, flag_names=_FLAG_NAMES
    )
    if not config.app:
        raise ConfigurationError(
            "no grain modules to host: pass --app MODULE, or set app = [\"module\"] in "
            "orleanspy.toml or ORLEANSPY_APP"
        )
    options = config.options
    from silo.spark_config import apply_spark_overrides

    spark = apply_spark_overrides(
        config.spark, master=args.spark_master, remote=args.spark_remote, conf=args.spark_conf
    )
    configure_logging(options.log_format, options.log_level)
    _put_cwd_on_path()

    def ready(silo: Silo) -> None:
        if silo.cluster is not None:
            print(f"orleanspy silo cluster silo={silo.address}", flush=True)
        gateway = silo.gateway.address if silo.gateway is not None else "none"
        print(f"orleanspy silo ready gateway={gateway}", flush=True)

    runner = asyncio.Runner()
    try:
        code = runner.run(
            run_silo(options, config.app, on_ready=ready, stream_providers=config.streams,
                     spark=spark)
        )
    except BaseException:
        runner.close()
        raise
    if code != EXIT_OK:
        # Forced or failed shutdown: do not wait for leftover tasks or storage threads.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    runner.close()
    return code


def _gateway_settings(args: argparse.Namespace) -> tuple[str, str, str | None]:
    """(gateway, cluster id, secret) of a client command: flags, else the config file."""
    options = load_config(find_config_file(args.config)).options
    cluster_id = args.cluster_id or options.cluster_id
    secret = args.secret if args.secret is not None else options.secret
    gateway = args.gateway
    if gateway is None:
        host = options.host if options.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        gateway = f"{host}:{options.gateway_port or 30000}"
    return gateway, cluster_id, secret


def _cmd_spark_run(args: argparse.Namespace) -> int:
    gateway, cluster_id, secret = _gateway_settings(args)
    try:
        key = parse_key(args.key, args.key_type)
    except ValueError:
        raise ConfigurationError(f"KEY {args.key!r} is not a valid {args.key_type}") from None
    configure_logging("console", "error")
    _put_cwd_on_path()
    return asyncio.run(_spark_run(gateway, cluster_id, secret, args, key))


async def _spark_run(
    gateway: str, cluster_id: str, secret: str | None, args: argparse.Namespace, key: Any
) -> int:
    from silo.spark_cli import run_spark_job

    client = ClusterClient(
        gateways=[gateway], cluster_id=cluster_id, secret=secret, response_timeout=args.timeout
    )
    try:
        try:
            await client.connect()
        except SiloUnavailableError as exc:
            _error(f"cannot reach the silo gateway at {gateway}: {exc}")
            return EXIT_USAGE
        try:
            result = await run_spark_job(
                client, args.grain_type, key, args.method, [parse_arg(a) for a in args.args],
                interval=args.interval,
            )
        except SiloUnavailableError as exc:
            _error(f"lost the silo gateway at {gateway}: {exc}")
            return EXIT_USAGE
        except Exception as exc:
            _error(_error_text(exc))
            return EXIT_CALL_FAILED
    finally:
        await client.close()
    print(_render(result), flush=True)
    return EXIT_OK


def _cmd_cluster_status(args: argparse.Namespace) -> int:
    flags = {"membership": args.membership, "cluster_id": args.cluster_id,
             "secret": args.secret, "data_dir": args.data_dir}
    options = load_config(find_config_file(args.config), flags, defaults=CLI_DEFAULTS).options
    if options.membership is None:
        raise ConfigurationError(
            "cluster status needs the membership table: pass --membership sqlite:PATH "
            "(the silos' --membership), or set membership in orleanspy.toml"
        )
    configure_logging("console", "error")
    return asyncio.run(_cluster_status(options, args.timeout, args.json))


async def _cluster_status(options: Any, timeout: float, as_json: bool) -> int:
    import time

    from orleanspy.cluster.membership import SiloStatus
    from orleanspy.cluster.runtime import open_membership_table
    from orleanspy.cluster.transport import query_silo
    from orleanspy.errors import MembershipError

    table = open_membership_table(options.membership, options.cluster_id, options.data_dir)
    try:
        data = await table.read_all()
    except MembershipError as exc:
        _error(f"cannot read the membership table {options.membership}: {exc}")
        return EXIT_USAGE
    finally:
        await table.close()
    now = time.time()
    entries = sorted(data.entries(), key=lambda e: (e.silo.host, e.silo.port,
                                                     e.silo.generation))

    async def ask(entry: Any) -> Any:
        if entry.status is SiloStatus.DEAD:
            return None
        try:
            return await query_silo(entry.silo.host, entry.silo.port, "status", [],
                                    cluster_id=options.cluster_id, secret=options.secret,
                                    timeout=timeout)
        except (Exception, TimeoutError):
            return None

    answers = await asyncio.gather(*(ask(e) for e in entries))
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
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    for line in lines:
        cells = [cell.ljust(w) for cell, w in zip(line, widths, strict=False)]
        print("  ".join([*cells, line[-1]]).rstrip(), flush=True)
    return EXIT_OK


def _cmd_call(args: argparse.Namespace) -> int:
    config = load_config(find_config_file(args.config))
    options = config.options
    cluster_id = args.cluster_id or options.cluster_id
    secret = args.secret if args.secret is not None else options.secret
    gateways: list[str] = args.gateway or []
    if not gateways:
        host = options.host if options.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        gateways = [f"{host}:{options.gateway_port or 30000}"]
    try:
        key = parse_key(args.key, args.key_type)
    except ValueError:
        raise ConfigurationError(f"KEY {args.key!r} is not a valid {args.key_type}") from None
    call_args = [parse_arg(a) for a in args.args]
    configure_logging("console", "error")
    _put_cwd_on_path()  # so that dataclasses in results resolve as in the silo
    return asyncio.run(
        _call(gateways, cluster_id, secret, args.timeout, args.grain_type, key, args.method,
              call_args)
    )


async def _call(
    gateways: list[str], cluster_id: str, secret: str | None, timeout: float,
    grain_type: str, key: Any, method: str, args: list[Any],
) -> int:
    from orleanspy.options import ClientOptions

    gateway = ", ".join(gateways)
    # One call needs one gateway: connect to the first that answers, not to all of them.
    client = ClusterClient(ClientOptions(
        gateways=tuple(gateways), cluster_id=cluster_id, secret=secret,
        response_timeout=timeout, gateway_count=1,
    ))
    try:
        try:
            await client.connect()
        except SiloUnavailableError as exc:
            _error(f"cannot reach the silo gateway at {gateway}: {exc}")
            return EXIT_USAGE
        ref: Any = client.get_grain(grain_type, key)
        try:
            result = await ref.invoke(method, *args)
        except SiloUnavailableError as exc:
            _error(f"lost the silo gateway at {gateway}: {exc}")
            return EXIT_USAGE
        except Exception as exc:
            _error(_error_text(exc))
            return EXIT_CALL_FAILED
    finally:
        await client.close()
    print(_render(result), flush=True)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``orleanspy`` console script and of ``python -m silo``."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except ConfigurationError as exc:
        _error(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    return code
