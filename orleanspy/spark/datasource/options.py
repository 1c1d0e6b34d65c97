"""The options of ``format("orleanspy")``, read from Spark's option map and checked.

Every option is a string (Spark's option map); a bad value raises ``ConfigurationError``
naming the option, the value and a valid example.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from orleanspy._util.urls import parse_backend_url, relative_sqlite
from orleanspy.errors import ConfigurationError

__all__ = ["FORMAT", "SinkOptions", "SourceOptions"]

#: the name the data source registers under: ``spark.readStream.format(FORMAT)``
FORMAT: Final = "orleanspy"


def _get(options: Mapping[str, str], name: str) -> str | None:
    """Spark passes option names as given or lower-cased: look up both."""
    value = options.get(name)
    if value is None:
        value = options.get(name.lower())
    return None if value is None else str(value)


def _url(options: Mapping[str, str]) -> str:
    url = _get(options, "url")
    if not url:
        raise ConfigurationError(
            "format('orleanspy'): option url is missing; set it to the stream provider's "
            "adapter as the silos configure it, e.g. .option('url', 'redis://127.0.0.1:6379/0"
            "?prefix=app') or .option('url', 'sqlite:/srv/app/streams.db')")
    parsed = parse_backend_url(url, key="format('orleanspy') option url",
                               allow=frozenset({"memory", "sqlite", "redis"}),
                               example="sqlite:/srv/app/streams.db")
    if parsed.scheme == "memory":
        raise ConfigurationError(
            "format('orleanspy') option url = 'memory': the in-memory adapter's queues live "
            "inside one silo process, where Spark cannot read them; configure the provider "
            "with a durable adapter (adapter = 'sqlite:PATH' or 'redis://HOST:PORT/DB') and "
            "give Spark the same URL")
    if parsed.scheme == "sqlite":
        if relative_sqlite(url) is not None:
            raise ConfigurationError(
                f"format('orleanspy') option url = {url!r}: a relative SQLite path would "
                "resolve against each Spark process's own working directory, not the silos' "
                "data dir; give the queue file's absolute path (sqlite:/srv/app/streams.db)")
        return f"sqlite:{parsed.path}"
    return parsed.text


def _int(options: Mapping[str, str], name: str, default: int, least: int) -> int:
    raw = _get(options, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = least - 1
    if value < least:
        raise ConfigurationError(
            f"format('orleanspy') option {name} = {raw!r}: must be an integer >= {least}")
    return value


def _float(options: Mapping[str, str], name: str, default: float) -> float:
    raw = _get(options, name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ConfigurationError(
            f"format('orleanspy') option {name} = {raw!r}: must be a number of seconds > 0")
    return value


def _start(raw: str | None, name: str, default: str) -> str | float:
    """``earliest``, ``latest`` or a time (seconds since the epoch)."""
    text = (raw or default).strip().lower()
    if text in ("earliest", "latest"):
        return text
    try:
        return float(text)
    except ValueError:
        raise ConfigurationError(
            f"format('orleanspy') option {name} = {raw!r}: use earliest, latest or a time in "
            "seconds since the epoch (e.g. 1767225600)") from None


def _names(raw: str | None) -> frozenset[str]:
    return frozenset(n.strip() for n in (raw or "").split(",") if n.strip())


@dataclass(frozen=True, slots=True)
class _Provider:
    """Where the provider's queues are: the adapter's URL, the provider's name and its
    queue count (``total_queues``), as the silos configure them."""

    url: str
    provider: str
    queues: int


def _provider(options: Mapping[str, str]) -> _Provider:
    return _Provider(_url(options), _get(options, "provider") or "default",
                     _int(options, "queues", 8, 1))


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """What ``spark.read`` / ``spark.readStream`` ``.format("orleanspy")`` reads.

    Options: ``url``, ``provider`` (default ``default``), ``queues`` (8), ``namespaces``
    (comma-separated; all if unset), ``streams`` (``namespace/key``, comma-separated; all if
    unset), ``startingOffsets`` (``earliest``, ``latest`` or a time; streaming default
    ``latest``, batch ``earliest``), ``endingOffsets`` (batch: ``latest`` or a time),
    ``maxEventsPerTrigger``, ``reader`` (the name of this reader's hold on retention, one
    per query; default ``spark``), ``holdSeconds`` (how long a hold outlives the reader's
    last trigger, 3600), ``warnBehind`` (a queue this many sequences behind its newest at a
    trigger logs ``spark_source_far_behind``, 1,000,000), ``failOnDataLoss`` (true),
    ``pageSize`` (containers per read, 512), ``maxHoldSequences`` (a queue further behind
    than this is no longer held: its hold lapses ``holdSeconds`` later; 0, the default: no
    bound).
    """

    url: str
    provider: str
    queues: int
    namespaces: frozenset[str]
    streams: frozenset[str]
    starting: str | float
    ending: str | float
    max_events: int
    reader: str
    hold_seconds: float
    fail_on_data_loss: bool
    page: int
    warn_behind: int
    max_hold: int

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool) -> SourceOptions:
        where = _provider(options)
        loss = (_get(options, "failOnDataLoss") or "true").strip().lower()
        if loss not in ("true", "false"):
            raise ConfigurationError(
                f"format('orleanspy') option failOnDataLoss = {loss!r}: use true or false")
        ending = _start(_get(options, "endingOffsets"), "endingOffsets", "latest")
        if ending == "earliest":
            raise ConfigurationError(
                "format('orleanspy') option endingOffsets = 'earliest' reads nothing; use "
                "latest or a time")
        return cls(
            where.url, where.provider, where.queues, _names(_get(options, "namespaces")),
            _names(_get(options, "streams")),
            _start(_get(options, "startingOffsets"), "startingOffsets",
                   "latest" if streaming else "earliest"),
            ending, _int(options, "maxEventsPerTrigger", 0, 1),
            _get(options, "reader") or "spark", _float(options, "holdSeconds", 3600.0),
            loss == "true", _int(options, "pageSize", 512, 1),
            _int(options, "warnBehind", 1_000_000, 1), _int(options, "maxHoldSequences", 0, 0))


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """What ``df.write`` / ``df.writeStream`` ``.format("orleanspy")`` publishes to.

    Options: ``url``, ``provider``, ``queues`` (as for the source), ``namespace`` (the
    namespace of rows without a ``namespace`` column), ``writerId`` (names the markers that
    make a retried partition publish nothing; streaming default: the query's id, which
    survives a restart from the checkpoint), ``rememberSeconds`` (how long markers are kept,
    7 days).
    """

    url: str
    provider: str
    queues: int
    namespace: str
    writer_id: str
    remember: float

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        where = _provider(options)
        return cls(where.url, where.provider, where.queues, _get(options, "namespace") or "",
                   _get(options, "writerId") or "", _float(options, "rememberSeconds",
                                                           7 * 86400.0))
