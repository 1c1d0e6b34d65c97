"""``orleanspy spark run``: call a Spark grain's method through a gateway, drawing its job's
progress on stderr (``silo.spark_progress``) and printing the result as JSON."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from orleanspy import SiloUnavailableError
from silo.commands.common import (
    EXIT_CALL_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    ClientSettings,
    GatewayUnreachable,
    add_client_arguments,
    client_settings,
    connect,
    error,
    error_text,
    put_cwd_on_path,
    render,
    usage,
)
from silo.spark_progress import run_spark_job
from silo.startup import configure_logging

__all__ = ["add_parser"]

_EPILOG = """\
Example:
  orleanspy spark run --gateway 127.0.0.1:30000 ClickAnalytics daily report '"lake"'

The grain must derive from orleanspy.spark.SparkGrain. ARGS are JSON when they parse as
JSON, else plain strings. Exit codes as for 'orleanspy call'.
"""


def add_parser(commands: Any) -> None:
    """Register ``spark`` and its ``run`` subcommand on the top-level subparsers."""
    spark = commands.add_parser(
        "spark", help="run Spark grain jobs", description="Spark analytics grains.",
    )
    spark.set_defaults(handler=lambda _: usage(spark))
    spark_commands = spark.add_subparsers(dest="spark_command", metavar="SUBCOMMAND")
    spark_run = spark_commands.add_parser(
        "run", help="call a Spark grain's method, showing its job's progress",
        description="Call a SparkGrain method through a gateway; draw the progress of its "
        "Spark job on stderr and print the result as JSON.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_client_arguments(
        spark_run, timeout=3600.0, grain_help="Spark grain type name",
        method_help="method that runs the Spark job",
    )
    spark_run.add_argument("--interval", type=float, default=0.5, metavar="SECONDS",
                           help="progress poll period (default: 0.5)")
    spark_run.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handle ``orleanspy spark run``."""
    settings = client_settings(args)
    configure_logging("console", "error")
    put_cwd_on_path()
    return asyncio.run(_spark_run(settings, args.interval))


async def _spark_run(settings: ClientSettings, interval: float) -> int:
    try:
        async with connect(settings) as client:
            try:
                result = await run_spark_job(
                    client, settings.grain_type, settings.key, settings.method,
                    settings.args, interval=interval,
                )
            except SiloUnavailableError as exc:
                error(f"lost the silo gateway ({settings.source}): {exc}")
                return EXIT_USAGE
            except Exception as exc:
                error(error_text(exc))
                return EXIT_CALL_FAILED
    except GatewayUnreachable as exc:
        error(str(exc))
        return EXIT_USAGE
    print(render(result), flush=True)
    return EXIT_OK
