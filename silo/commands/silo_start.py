"""``orleanspy silo start``: host the grains of the ``--app`` modules until a signal."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any, Final

from orleanspy import ConfigurationError, Silo
from orleanspy.cluster.config import check_private
from silo.commands import silo_stop
from silo.commands.common import CLI_DEFAULTS, EXIT_OK, put_cwd_on_path, usage
from silo.config import find_config_file, load_config
from silo.dashboard import ops_server_of
from silo.run_records import remove_record, write_record
from silo.spark_config import apply_spark_overrides
from silo.startup import configure_logging, run_silo

__all__ = ["add_parser"]

# option field -> flag, for the flags not spelled --<field-name>
_FLAG_NAMES: Final = {"collection_age": "--idle-age", "minimum_reminder_period":
                      "--min-reminder-period", "app": "--app"}

_EPILOG = """\
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
Without --membership the silo runs alone and opens no silo-to-silo port. Silos prove to
each other that they hold the cluster key (--cluster-key-file, cluster_key in TOML or
$ORLEANSPY_CLUSTER_KEY; by default a key kept in the membership table), which clients and
tools never need. See docs/security.md.

Once serving, the silo prints one line to stdout:
  orleanspy silo ready gateway=HOST:PORT
(a clustered silo first prints "orleanspy silo cluster silo=HOST:PORT@GENERATION").
Logs go to stderr. SIGINT/SIGTERM stop it gracefully (changed grain state is written;
its membership row reads stopped); a second signal exits at once with code 1. A start is
all or nothing: every port is bound first, and a silo that cannot start (a port is taken,
say) rolls back and exits 2 with one "error: ..." line, without ever reading active in
the membership table, leasing a queue or serving a request; a signal during the start
rolls it back too. Clients are served once the silo is active.
"""


def add_parser(commands: Any) -> None:
    """Register ``silo`` and its ``start`` and ``stop`` subcommands."""
    silo = commands.add_parser(
        "silo", help="run and manage silos", description="Run and manage silo processes.",
    )
    silo.set_defaults(handler=lambda _: usage(silo))
    silo_commands = silo.add_subparsers(dest="silo_command", metavar="SUBCOMMAND")
    start = silo_commands.add_parser(
        "start", help="start a silo hosting the grains of --app modules",
        description="Start a silo that hosts the Grain subclasses defined in the --app "
        "modules; grain state and reminders default to embedded SQLite in --data-dir "
        "(--storage and --reminders choose another back end).",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_arguments(start)
    start.set_defaults(handler=run)
    silo_stop.add_subcommand(silo_commands)


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--app", action="append", metavar="MODULE",
                   help="module whose Grain subclasses to host (repeatable); imported with "
                   "the working directory on sys.path")
    p.add_argument("--config", metavar="FILE",
                   help="TOML config file (default: $ORLEANSPY_CONFIG or ./orleanspy.toml)")
    p.add_argument("--cluster-id", help="cluster id clients must name (default: dev)")
    p.add_argument("--host", help="address to listen on (default: 127.0.0.1); beyond "
                   "loopback it needs --cluster-key-file (cluster) and --secret (gateway)")
    p.add_argument("--advertise", metavar="HOST",
                   help="address the other silos and clients reach this silo at, when it "
                   "differs from --host (needed with --host 0.0.0.0)")
    p.add_argument("--port", type=int, help="silo-to-silo port (default: 11111)")
    p.add_argument("--gateway-port", type=int,
                   help="client gateway port; 0 picks a free one (default: 30000)")
    p.add_argument("--secret", help="shared secret clients must present (default: none)")
    p.add_argument("--cluster-key-file", metavar="FILE",
                   help="file holding the key silos prove to each other (cluster_key; "
                   "default: a key kept in the membership table); it must not be readable "
                   "by group or others (chmod 600 FILE)")
    p.add_argument("--allow-readable-secrets", action="store_true", default=None,
                   help="accept a cluster key file or a membership file that group or others "
                   "can read (allow_readable_secrets; default: refuse it at start)")
    p.add_argument("--storage", metavar="URL",
                   help="grain storage: memory, sqlite:PATH (relative to --data-dir; in a "
                   "cluster absolute), redis://HOST:PORT/DB?prefix=P or "
                   "postgresql://USER@HOST:PORT/DB?schema=S (default: "
                   "sqlite:orleanspy.db; in a cluster beside the membership table)")
    p.add_argument("--reminders", metavar="URL",
                   help="reminder table: memory, sqlite:PATH, redis://HOST:PORT/DB?prefix=P "
                   "or postgresql://USER@HOST:PORT/DB?schema=S (default: sqlite:orleanspy.db)")
    p.add_argument("--dashboard-port", type=int, metavar="PORT",
                   help="serve the dashboard page, /healthz, /readyz, /metrics (Prometheus), "
                   "/api/silo and /api/cluster on this port (0: any free port; default: "
                   "none)")
    p.add_argument("--dashboard-host", default="127.0.0.1", metavar="HOST",
                   help="address of those endpoints (default: 127.0.0.1; beyond loopback only "
                   "with --secret, which requests then present as a Bearer token)")
    p.add_argument("--stream-prober", metavar="PROVIDER",
                   help="probe this stream provider like a customer: subscribe, publish a "
                   "marked event, time both (metrics orleanspy_probe_*; default: none)")
    p.add_argument("--stream-prober-period", type=float, default=10.0, metavar="SECONDS",
                   help="time between probes (default: 10)")
    p.add_argument("--stream-prober-bound", type=float, default=5.0, metavar="SECONDS",
                   help="a probe slower than this is logged at warning (default: 5)")
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
                   help="membership table of the cluster to join: sqlite:/ABSOLUTE/PATH (every "
                   "silo opens the same file), redis://HOST:PORT/DB?prefix=P, "
                   "postgresql://USER@HOST:PORT/DB?schema=S or memory; omit "
                   "to run a lone silo (default: none)")
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


def _read_key_file(path: str | None) -> str | None:
    """The cluster key held in ``path`` (surrounding whitespace removed), or None."""
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            key = f.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(
            f"--cluster-key-file {path}: cannot read it ({exc}); give a readable text file "
            "holding the cluster key"
        ) from None
    if not key:
        raise ConfigurationError(f"--cluster-key-file {path}: the file is empty; put the "
                                 "cluster key in it")
    return key


def run(args: argparse.Namespace) -> int:
    """Handle ``orleanspy silo start``: returns once the silo has stopped."""
    flags = {
        "app": args.app,
        "cluster_id": args.cluster_id,
        "host": args.host,
        "advertise": args.advertise,
        "port": args.port,
        "gateway_port": args.gateway_port,
        "secret": args.secret,
        "cluster_key": _read_key_file(args.cluster_key_file),
        "allow_readable_secrets": args.allow_readable_secrets,
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
    if args.cluster_key_file is not None and not options.allow_readable_secrets:
        check_private(args.cluster_key_file, "it holds the cluster key")
    spark = apply_spark_overrides(
        config.spark, master=args.spark_master, remote=args.spark_remote, conf=args.spark_conf
    )
    configure_logging(options.log_format, options.log_level)
    put_cwd_on_path()

    dashboard = None if args.dashboard_port is None else (args.dashboard_host,
                                                          args.dashboard_port)
    if args.stream_prober is not None and (args.stream_prober_period <= 0
                                           or args.stream_prober_bound <= 0):
        raise ConfigurationError("--stream-prober-period and --stream-prober-bound must be "
                                 "> 0 seconds")
    prober = None if args.stream_prober is None else (
        args.stream_prober, args.stream_prober_period, args.stream_prober_bound)

    record: list[Path] = []

    def ready(silo: Silo) -> None:
        ops = ops_server_of(silo)
        record.append(write_record(options.data_dir, {
            "silo": silo.name, "cluster": options.cluster_id,
            "gateway": silo.gateway.address if silo.gateway is not None else None,
            "dashboard": f"http://{ops.address}" if ops is not None else None}))
        if ops is not None:
            print(f"orleanspy silo dashboard http://{ops.address}", flush=True)
        if silo.cluster is not None:
            print(f"orleanspy silo cluster silo={silo.address}", flush=True)
        gateway = silo.gateway.address if silo.gateway is not None else "none"
        print(f"orleanspy silo ready gateway={gateway}", flush=True)

    runner = asyncio.Runner()
    try:
        code = runner.run(
            run_silo(options, config.app, on_ready=ready, stream_providers=config.streams,
                     spark=spark, dashboard=dashboard, prober=prober,
                     filters=config.filters)
        )
    except BaseException:
        for path in record:
            remove_record(path)
        runner.close()
        raise
    for path in record:
        remove_record(path)
    if code != EXIT_OK:
        # Forced or failed shutdown: do not wait for leftover tasks or storage threads.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    runner.close()
    return code
