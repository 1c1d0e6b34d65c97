"""``orleanspy lake compact``: merge the small Parquet files of a lake's closed partitions
(``orleanspy.spark.compaction``), online and crash-safe; run it from cron or a timer on one
host that reaches the lake."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from orleanspy import ConfigurationError
from orleanspy.spark.compaction import CompactionOptions, CompactionResult, compact
from orleanspy.spark.lake import resolve_dataset
from silo.commands.common import EXIT_CALL_FAILED, EXIT_OK, EXIT_USAGE, error, usage
from silo.config import find_config_file, load_config
from silo.startup import configure_logging

__all__ = ["add_parser", "datasets"]

_EPILOG = """\
Examples:
  orleanspy lake compact /shared/lake --target-size-mib 128 --grace 3600
  orleanspy lake compact --config /srv/shop/orleanspy.toml     # its [spark] lake

PATH is the lake (every dataset folder under it: one per sink, e.g. <lake>/pageviews; default:
[spark] lake of the config file: --config, $ORLEANSPY_CONFIG or ./orleanspy.toml), or one
dataset (a folder holding date=YYYY-MM-DD partitions). A partition is compacted once its hour
(or day) ended more than --grace seconds ago. Safe to run while sinks write and Spark reads;
two runs on one dataset do not overlap (the second skips it). Exit 1 if a partition could not
be compacted (it is left as it was; the log says why).
"""


def add_parser(commands: Any) -> None:
    """Register ``lake`` and its ``compact`` subcommand on the top-level subparsers."""
    lake = commands.add_parser("lake", help="maintain the Parquet lake of the sinks",
                               description="The Parquet lake that ParquetSink grains write.")
    lake.set_defaults(handler=lambda _: usage(lake))
    sub = lake.add_subparsers(dest="lake_command", metavar="SUBCOMMAND")
    cmd = sub.add_parser(
        "compact", help="merge the small files of closed partitions",
        description="Merge the small Parquet files of the closed partitions of a lake into "
        "files of a target size; every row stays visible exactly once, also across a crash.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cmd.add_argument("path", metavar="PATH", nargs="?",
                     help="the lake folder, or one dataset folder (default: [spark] lake of "
                     "the config file)")
    cmd.add_argument("--config", metavar="FILE",
                     help="TOML config file whose [spark] lake is the default PATH (default: "
                     "$ORLEANSPY_CONFIG, else ./orleanspy.toml)")
    cmd.add_argument("--target-size-mib", type=float, default=128.0, metavar="MIB",
                     help="size a merged file aims at, MiB (default: 128)")
    cmd.add_argument("--grace", type=float, default=3600.0, metavar="SECONDS",
                     help="seconds after a partition's end before it is compacted "
                     "(default: 3600)")
    cmd.add_argument("--json", action="store_true", help="print one JSON object per dataset")
    cmd.set_defaults(handler=run)


def datasets(path: Path) -> list[Path]:
    """``path`` itself if it holds ``date=`` partitions, else its dataset sub-folders."""
    if any(p.name.startswith("date=") for p in path.iterdir()):
        return [path]
    return sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))
                  and any(q.name.startswith("date=") for q in p.iterdir()))


def run(args: argparse.Namespace) -> int:
    """Handle ``orleanspy lake compact``."""
    configure_logging("console", "warning")  # a failed partition is a warning
    try:
        path = Path(args.path) if args.path is not None else _configured_lake(args.config)
    except ConfigurationError as exc:
        error(str(exc))
        return EXIT_USAGE
    if not path.is_dir():
        error(f"lake compact: {path} is not a folder (give the lake, e.g. /shared/lake)")
        return EXIT_USAGE
    try:
        options = CompactionOptions(target_size=int(args.target_size_mib * 1024 * 1024),
                                    grace=args.grace)
    except ConfigurationError as exc:
        error(str(exc))
        return EXIT_USAGE
    failed = False
    for dataset in datasets(path):
        try:
            result = compact(dataset, options)
        except OSError as exc:
            error(f"lake compact: {dataset}: {exc}")
            failed = True
            continue
        print(_render(dataset, result, args.json), flush=True)
        failed = failed or result.failed > 0
    return EXIT_CALL_FAILED if failed else EXIT_OK


def _configured_lake(config_file: str | None) -> Path:
    """``[spark] lake`` of the config file (relative: under its ``data_dir``)."""
    found = find_config_file(config_file)
    if found is None:
        raise ConfigurationError("lake compact: give PATH, or run where orleanspy.toml sets "
                                 "[spark] lake (or pass --config FILE)")
    config = load_config(found)
    lake = None if config.spark is None else config.spark.lake
    if lake is None:
        raise ConfigurationError(f"lake compact: {found} sets no [spark] lake; give PATH or "
                                 "add [spark] lake = \"/shared/lake\"")
    return resolve_dataset(lake, None, config.options.data_dir)


def _render(dataset: Path, r: CompactionResult, as_json: bool) -> str:
    if as_json:
        return json.dumps({"dataset": str(dataset), "partitions": r.partitions,
                           "files_before": r.files_before, "files_after": r.files_after,
                           "recovered": r.recovered, "skipped_locked": r.skipped_locked,
                           "failed": r.failed})
    if r.skipped_locked:
        return f"{dataset}: skipped (another compaction holds it)"
    failed = f", {r.failed} partitions failed (see the log)" if r.failed else ""
    return (f"{dataset}: {r.partitions} partitions compacted, {r.files_before} -> "
            f"{r.files_after} files, {r.recovered} interrupted compactions recovered{failed}")
