"""SparkOptions (the silo's SparkSession) and ParquetSinkOptions (stream -> Parquet)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from orleanspy.errors import ConfigurationError

__all__ = ["DEFAULT_SPARK_CONF", "LOCAL_SPARK_CONF", "ParquetSinkOptions", "SparkOptions"]

DEFAULT_SPARK_CONF: Mapping[str, str] = {
    "spark.ui.showConsoleProgress": "false",
    "spark.scheduler.mode": "FAIR",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
}
"""Settings every embedded session gets unless ``conf`` overrides them: no console progress
bar on stderr, FAIR scheduling between concurrent grain calls (a short query does not wait
for a long one to finish), Arrow for pandas conversions."""

LOCAL_SPARK_CONF: Mapping[str, str] = {
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
}
"""Added for ``local`` masters only: the driver listens on loopback."""

_LOG_LEVELS = ("ALL", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF", "TRACE")


def _check(name: str, ok: bool, value: object, rule: str, cls: str = "SparkOptions") -> None:
    if not ok:
        raise ConfigurationError(f"{cls}.{name} = {value!r}: {rule}")


@dataclass(frozen=True, slots=True, kw_only=True)
class SparkOptions:
    """The SparkSession of a silo. Durations are float seconds.

    Attributes:
        master: the Spark master: ``local[*]`` (default: embedded, every core), ``local[N]``,
            ``spark://host:7077``, ``yarn``, ``k8s://https://...``. An ``sc://host:port``
            value here means Spark Connect, like ``remote``.
        remote: a Spark Connect URL (``sc://host:15002``); when set, the silo is a thin client
            of that server instead of an embedded driver (DataFrame/SQL API only).
        app_name: the Spark application name.
        conf: any ``spark.*`` setting, merged over ``DEFAULT_SPARK_CONF``; values are
            strings (numbers and booleans are converted).
        max_concurrent_jobs: worker threads running jobs; further calls queue.
        progress_interval: how often a running job's progress is polled (off the loop).
        cancel_interval: how often a cancelled job's cancellation is repeated until its
            thread returns (Spark only cancels jobs that already exist).
        log_level: the JVM's log level after start (``sc.setLogLevel``).
        stop_timeout: how long ``stop()`` keeps cancelling in-flight jobs before it stops
            the session anyway.
        lake: the folder every ``ParquetSink`` of the silo lands under (a relative sink
            ``path`` resolves against it) and Spark reads from. In a cluster it must be an
            absolute path that every silo and Spark reach (shared storage); a relative one
            resolves against the silo's ``data_dir`` and is refused in a cluster.

    Raises:
        ConfigurationError: a bad value (the message names the field).
    """

    master: str = "local[*]"
    remote: str | None = None
    app_name: str = "orleanspy"
    conf: Mapping[str, Any] = field(default_factory=dict)
    max_concurrent_jobs: int = 2
    progress_interval: float = 0.5
    cancel_interval: float = 0.5
    log_level: str = "ERROR"
    stop_timeout: float = 10.0
    lake: str | None = None

    def __post_init__(self) -> None:
        _check("master", isinstance(self.master, str) and bool(self.master), self.master,
               "must be a master URL such as local[*], spark://host:7077 or sc://host:15002")
        if self.remote is not None:
            _check("remote", isinstance(self.remote, str) and self.remote.startswith("sc://"),
                   self.remote, "must be a Spark Connect URL sc://host:port")
        _check("app_name", isinstance(self.app_name, str) and bool(self.app_name),
               self.app_name, "must be a non-empty string")
        if not isinstance(self.conf, Mapping):
            raise ConfigurationError(
                f"SparkOptions.conf = {self.conf!r}: must be a mapping of spark.* keys"
            )
        conf: dict[str, str] = {}
        for key, value in self.conf.items():
            if not isinstance(key, str) or not key.startswith("spark."):
                raise ConfigurationError(
                    f"SparkOptions.conf[{key!r}]: Spark settings start with 'spark.' "
                    "(e.g. spark.sql.shuffle.partitions)"
                )
            if isinstance(value, bool):
                value = "true" if value else "false"
            elif not isinstance(value, (str, int, float)):
                raise ConfigurationError(
                    f"SparkOptions.conf[{key!r}] = {value!r}: must be a string, number or "
                    "boolean"
                )
            conf[key] = str(value)
        object.__setattr__(self, "conf", conf)
        n = self.max_concurrent_jobs
        _check("max_concurrent_jobs", isinstance(n, int) and n >= 1, n, "must be an int >= 1")
        for name in ("progress_interval", "cancel_interval", "stop_timeout"):
            value = getattr(self, name)
            _check(name, isinstance(value, (int, float)) and value > 0, value,
                   "must be > 0 seconds")
        if self.lake is not None:
            _check("lake", isinstance(self.lake, str) and bool(self.lake), self.lake,
                   "must be a folder path (absolute in a cluster), e.g. /shared/lake")
        _check("log_level", self.log_level.upper() in _LOG_LEVELS, self.log_level,
               "must be one of " + ", ".join(_LOG_LEVELS))

    @property
    def connect_url(self) -> str | None:
        """The Spark Connect URL, if this session is a Connect client."""
        if self.remote is not None:
            return self.remote
        return self.master if self.master.startswith("sc://") else None

    @property
    def is_local(self) -> bool:
        return self.connect_url is None and self.master.startswith("local")

    def session_conf(self) -> dict[str, str]:
        """The settings the session is built with (defaults, then ``conf``)."""
        merged: dict[str, str] = {}
        if self.connect_url is None:
            merged.update(DEFAULT_SPARK_CONF)
            if self.is_local:
                merged.update(LOCAL_SPARK_CONF)
        merged.update(self.conf)
        return merged


@dataclass(frozen=True, slots=True, kw_only=True)
class ParquetSinkOptions:
    """Where and how a ``ParquetSink`` lands a stream namespace's events.

    Attributes:
        path: the dataset's root folder; relative paths resolve against the silo's lake
            (``SparkOptions.lake``) when it has one, else against its ``data_dir``. Files go
            to ``<path>/date=YYYY-MM-DD/hour=HH/`` (``partition``).
        partition: ``hour`` (default: ``date=YYYY-MM-DD/hour=HH``) or ``date``
            (``date=YYYY-MM-DD``), in UTC, of each event's timestamp.
        timestamp_field: the event field that dates it (epoch number in ``timestamp_unit``,
            a ``datetime`` or an ISO-8601 string); events without it are dated by arrival.
        timestamp_unit: ``ms`` or ``s`` for numeric timestamps.
        columns: optional fixed schema, column name -> Arrow type name (``string``,
            ``int64``, ``float64``, ``bool``, ``timestamp[ms]``...). Without it each file's
            schema is inferred from its events.
        metadata_columns: add ``_stream``, ``_seq`` and ``_idx`` (the stream key and the
            event's sequence token) to every row; needed for exact de-duplication audits.
        dedupe: skip redelivered events whose token is not newer than the newest token
            already committed for the stream (exact for adapters whose tokens survive a
            restart, such as SQLite; turn it off for adapters whose tokens restart, such as
            memory, when files outlive the queue).
        compression: Parquet compression codec.
        fsync: fsync each file and its folder before and after the rename (durable commit).
    """

    path: str = "parquet"
    timestamp_field: str | None = "ts"
    timestamp_unit: str = "ms"
    partition: str = "hour"
    columns: Mapping[str, str] | None = None
    metadata_columns: bool = True
    dedupe: bool = True
    compression: str = "snappy"
    fsync: bool = True

    def __post_init__(self) -> None:
        cls = "ParquetSinkOptions"
        _check("path", isinstance(self.path, str) and bool(self.path), self.path,
               "must be a folder path", cls)
        _check("timestamp_unit", self.timestamp_unit in ("ms", "s"), self.timestamp_unit,
               "must be 'ms' or 's'", cls)
        _check("partition", self.partition in ("hour", "date"), self.partition,
               "must be 'hour' or 'date'", cls)
        if self.columns is not None:
            _check("columns", isinstance(self.columns, Mapping) and bool(self.columns),
                   self.columns, "must map column names to Arrow type names", cls)
