"""The ``orleanspy`` command line: ``silo start`` hosts grains and ``silo stop`` stops them,
``call`` calls one, ``cluster status``, ``streams status``, ``grains locate``, ``grains show``,
``grains top`` and ``reminders list`` inspect a cluster, ``streams subscriptions``/
``unsubscribe`` and ``streams agents`` manage its streams, ``spark run`` runs a Spark grain's job,
``lake compact`` compacts the sinks' Parquet lake.

Each command lives in its own module under ``silo.commands``; this module builds the parser
from them and maps errors to exit codes.

Exit codes: 0 success; 1 the grain call failed (or a forced/failed silo shutdown);
2 bad usage or configuration, a silo that cannot start (a port is taken), a storage or
membership back end that cannot be used, a silo that refused the secret, or the gateway
cannot be reached. Errors are one line on
stderr (``error: ...``), never a traceback.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from orleanspy import ConfigurationError, __version__
from orleanspy.errors import MembershipError, StorageError
from silo.commands import (
    call,
    cluster_status,
    grains,
    lake,
    reminders,
    silo_start,
    spark_run,
    streams_status,
)
from silo.commands.common import CLI_DEFAULTS, EXIT_USAGE, error, parse_arg, parse_key, usage

__all__ = ["CLI_DEFAULTS", "build_parser", "main", "parse_arg", "parse_key"]

_DESCRIPTION = """\
orleanspy: virtual actors (grains) on asyncio.

  orleanspy silo start --app myapp.grains      host the grains of a module
  orleanspy silo start --app myapp.grains --membership sqlite:/srv/shop/cluster.db --port 0
                                               join a cluster (several processes)
  orleanspy cluster status --membership sqlite:/srv/shop/cluster.db
                                               list the silos of a cluster
  orleanspy streams status --membership sqlite:/srv/shop/cluster.db
                                               the stream queues: owners, cache, lag
  orleanspy streams subscriptions events clicks alice --membership sqlite:/srv/shop/cluster.db
                                               a stream's subscriptions (unsubscribe ID)
  orleanspy streams agents stop events --membership sqlite:/srv/shop/cluster.db
                                               stop pulling a provider's queues (start)
  orleanspy grains locate Counter alice --membership sqlite:/srv/shop/cluster.db
                                               which silo a grain is active on
  orleanspy grains show Counter alice --membership sqlite:/srv/shop/cluster.db
                                               one grain: silo, mailbox, reminders, streams
  orleanspy reminders list --reminders sqlite:/srv/shop/orleanspy.db
                                               the durable reminders, next due, owner
  orleanspy grains top --membership sqlite:/srv/shop/cluster.db
                                               the busiest grain methods, errors, p50/p99
  orleanspy call Counter alice increment 5     call a grain through a gateway
  orleanspy spark run Stats day report         run a Spark grain's job with a progress bar
  orleanspy lake compact /shared/lake          merge the small Parquet files of closed hours
  orleanspy silo stop --all                    stop this machine's silos gracefully
"""


def build_parser() -> argparse.ArgumentParser:
    """The ``orleanspy`` parser; each parsed namespace carries its command's ``handler``."""
    parser = argparse.ArgumentParser(
        prog="orleanspy", description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(handler=lambda _: usage(parser))
    parser.add_argument("--version", action="version", version=f"orleanspy {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    silo_start.add_parser(commands)
    cluster_status.add_parser(commands)
    streams_status.add_parser(commands)
    grains.add_parser(commands)
    reminders.add_parser(commands)
    call.add_parser(commands)
    spark_run.add_parser(commands)
    lake.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``orleanspy`` console script and of ``python -m silo``."""
    args = build_parser().parse_args(argv)
    try:
        code: int = args.handler(args)
    except (ConfigurationError, StorageError, MembershipError) as exc:
        error(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _closed_pipe()
    return code


def _closed_pipe() -> int:
    """The reader of our output went away (``orleanspy cluster status | head -3``): end
    quietly, as Unix tools do, without a traceback or a second error at exit."""
    import os
    import sys

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # the interpreter's final flush must not fail
    return 141  # 128 + SIGPIPE, what a shell reports for a tool killed by it
