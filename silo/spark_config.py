"""The silo's Spark session from the config file, the environment and flags -> SparkOptions.

TOML (``[spark]``; any ``spark.*`` key goes to the session, quoted because of its dots)::

    [spark]
    master = "local[*]"              # spark://host:7077, yarn, k8s://..., or sc://host:15002
    app_name = "clicks"
    max_concurrent_jobs = 2
    lake = "/shared/lake"             # where ParquetSinks land (absolute in a cluster)
    "spark.sql.shuffle.partitions" = 8

    [spark.conf]                      # the same, as a table
    "spark.driver.memory" = "2g"

Environment: ``ORLEANSPY_SPARK_MASTER``, ``ORLEANSPY_SPARK_REMOTE``. Flags (highest):
``--spark-master URL``, ``--spark-remote sc://host:port``, ``--spark-conf KEY=VALUE``.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Mapping, Sequence
from typing import Any, Final

from orleanspy import ConfigurationError
from orleanspy.spark.options import SparkOptions

__all__ = ["SPARK_KEY", "apply_spark_overrides", "parse_spark"]

SPARK_KEY: Final = "spark"
_FIELDS: Final = tuple(f.name for f in dataclasses.fields(SparkOptions) if f.name != "conf")
_ENV: Final = {"master": "ORLEANSPY_SPARK_MASTER", "remote": "ORLEANSPY_SPARK_REMOTE"}


def parse_spark(table: Any, label: str = "config") -> SparkOptions:
    """Build ``SparkOptions`` from a ``[spark]`` table (raises ``ConfigurationError``)."""
    where = f"{label}: {SPARK_KEY}"
    if not isinstance(table, dict):
        raise ConfigurationError(f"{where} must be a table ([{SPARK_KEY}])")
    values: dict[str, Any] = {}
    conf: dict[str, Any] = {}
    for key, value in table.items():
        if key == "conf":
            if not isinstance(value, dict):
                raise ConfigurationError(f"{where}.conf must be a table of spark.* keys")
            conf.update(value)
        elif key.startswith("spark."):
            conf[key] = value
        elif key in _FIELDS:
            values[key] = value
        else:
            close = difflib.get_close_matches(key, _FIELDS, n=1, cutoff=0.6)
            hint = (f"did you mean {close[0]}?" if close else
                    "known keys: " + ", ".join(_FIELDS) + ", conf, or any quoted spark.* key")
            raise ConfigurationError(f"{where}: key {key} is unknown; {hint}")
    try:
        return SparkOptions(**values, conf=conf)
    except (ConfigurationError, TypeError) as exc:
        raise ConfigurationError(f"{where}: {exc}") from None


def apply_spark_overrides(
    options: SparkOptions | None,
    *,
    master: str | None = None,
    remote: str | None = None,
    conf: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> SparkOptions | None:
    """Layer the environment, then flags, over the file's options.

    Returns None when nothing configures Spark (the silo then uses ``SparkOptions()`` on
    its first Spark call).
    """
    env = os.environ if environ is None else environ
    changes: dict[str, Any] = {}
    for name, var in _ENV.items():
        if env.get(var):
            changes[name] = env[var]
    if master is not None:
        changes["master"] = master
    if remote is not None:
        changes["remote"] = remote
    extra: dict[str, str] = {}
    for item in conf:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigurationError(
                f"flag --spark-conf {item!r}: write KEY=VALUE, e.g. "
                "--spark-conf spark.sql.shuffle.partitions=8"
            )
        extra[key.strip()] = value
    if options is None and not changes and not extra:
        return None
    base = options if options is not None else SparkOptions()
    try:
        return dataclasses.replace(base, **changes, conf={**base.conf, **extra})
    except ConfigurationError as exc:
        raise ConfigurationError(f"Spark settings (environment or flags): {exc}") from None
