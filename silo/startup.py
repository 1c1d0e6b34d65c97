"""Silo host startup: structlog configuration, signal handling and the run loop of one silo.

This is the only module that configures structlog (library code only logs). ``run_silo``
starts a silo, turns the first SIGINT/SIGTERM into a graceful ``silo.stop()`` (every
activation is deactivated and its changed state written; during the start, a rollback of
what had started) and a second one into a quick exit with code 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from typing import Any, Final, TextIO

import structlog

from orleanspy import ConfigurationError, Silo, SiloOptions
from orleanspy.logging import get_logger
from orleanspy.spark.options import SparkOptions
from orleanspy.spark.session import SparkSessionManager
from silo.dashboard import install_ops_server
from silo.dashboard.bounds import RateLimitedLog, limit_loop_error_logs, raise_fd_limit
from silo.dashboard.prober import ProbeConsumer, install_prober
from silo.filters_config import FilterSpecs, resolve_filters

__all__ = ["FORCED_EXIT_GRACE", "LOG_LEVELS", "configure_logging", "run_silo"]

LOG_LEVELS: Final = {"debug": 10, "info": 20, "warning": 30, "error": 40}
FORCED_EXIT_GRACE: Final = 1.0
"""Seconds a forced exit (second signal) gives the interrupted shutdown to unwind."""

_STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)


class _NamedWriteLogger(structlog.WriteLogger):
    """A WriteLogger that remembers the name passed to ``structlog.get_logger(name)``."""

    def __init__(self, file: TextIO, name: str | None) -> None:
        super().__init__(file)
        self.name = name


class _LoggerFactory:
    def __init__(self, stream: TextIO | None) -> None:
        self._stream = stream

    def __call__(self, *args: Any) -> _NamedWriteLogger:
        name = args[0] if args and isinstance(args[0], str) else None
        # Resolved at creation, so that a replaced sys.stderr (pytest capsys) is honoured.
        return _NamedWriteLogger(self._stream or sys.stderr, name)


def _add_logger_name(
    logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Add ``logger=<name>`` (the name given to ``get_logger``) unless already bound."""
    name = getattr(logger, "name", None)
    if name and "logger" not in event_dict:
        event_dict["logger"] = name
    return event_dict


def configure_logging(
    log_format: str = "console",
    level: str = "info",
    *,
    stream: TextIO | None = None,
    cache_loggers: bool = True,
) -> None:
    """Configure structlog for a silo process (no stdlib ``logging`` involved).

    Args:
        log_format: ``console`` renders for humans on a terminal and as ``key=value`` (logfmt)
            lines otherwise; ``json`` renders one JSON object per line.
        level: the lowest level written: debug, info, warning or error.
        stream: where lines go (default: ``sys.stderr``; stdout is left to the CLI).
        cache_loggers: cache each logger on first use (off in tests that reconfigure).

    Raises:
        ConfigurationError: for an unknown format or level.
    """
    if log_format not in ("console", "json"):
        raise ConfigurationError(f"log_format {log_format!r}: must be 'console' or 'json'")
    if level not in LOG_LEVELS:
        raise ConfigurationError(
            f"log_level {level!r}: must be one of {', '.join(LOG_LEVELS)}"
        )
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        _add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    if log_format == "json":
        processors += [structlog.processors.dict_tracebacks, structlog.processors.JSONRenderer()]
    elif _isatty(stream or sys.stderr):
        processors.append(structlog.dev.ConsoleRenderer())
    else:
        processors += [
            structlog.processors.format_exc_info,
            structlog.processors.LogfmtRenderer(
                key_order=["timestamp", "level", "logger", "event"],
                drop_missing=True,
                bool_as_flag=False,
            ),
        ]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(LOG_LEVELS[level]),
        context_class=dict,
        logger_factory=_LoggerFactory(stream),
        cache_logger_on_first_use=cache_loggers,
    )


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _install_signal_handlers(
    loop: asyncio.AbstractEventLoop, handler: Callable[[signal.Signals], None],
    signals: Iterable[signal.Signals],
) -> list[signal.Signals]:
    installed = []
    for sig in signals:
        try:
            loop.add_signal_handler(sig, handler, sig)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, Windows
            continue
        installed.append(sig)
    return installed


async def run_silo(
    options: SiloOptions,
    app_modules: Sequence[str],
    *,
    on_ready: Callable[[Silo], None] | None = None,
    signals: Iterable[signal.Signals] = _STOP_SIGNALS,
    stream_providers: Mapping[str, Any] | None = None,
    spark: SparkOptions | SparkSessionManager | None = None,
    dashboard: tuple[str, int] | None = None,
    prober: tuple[str, float, float] | None = None,
    filters: FilterSpecs | None = None,
) -> int:
    """Run one silo until a signal (or ``silo.stop()``) stops it.

    Args:
        options: the silo's options.
        app_modules: modules whose Grain subclasses the silo hosts (each must define one).
        on_ready: called once the silo serves requests (the CLI prints a ready line).
        signals: the signals that stop the silo (the first gracefully, the next forcibly).
        spark: ``SparkOptions`` of the silo's SparkSession (created on the first Spark job,
            stopped by the silo's lifecycle once every grain has deactivated), or a shared
            ``SparkSessionManager`` its creator stops; None uses the defaults.
        dashboard: (host, port) of the operations endpoints (``/healthz``, ``/readyz``,
            ``/metrics``, ``/api/silo``; port 0 picks one); None serves none.
        prober: (stream provider, period, bound) of the built-in stream prober; None runs
            none.
        filters: the silo's call filters (the config file's ``[filters]`` table), imported
            here, after the app modules.

    Returns:
        0 after a graceful stop (a signal during the start rolls the start back and also
        returns 0); 1 if a second signal forced the exit, or the shutdown failed or overran
        ``2 * shutdown_timeout + 5`` seconds.

    Raises:
        ConfigurationError: an app module is missing or hosts no grain class, or the silo
            cannot start (e.g. the gateway port is taken).
    """
    log = get_logger("silo.startup", cluster=options.cluster_id)
    # The data dir holds the membership file (the cluster key, unless configured) and
    # grain state: private to the silo's user when the silo creates it.
    os.makedirs(options.data_dir, mode=0o700, exist_ok=True)
    # A flood of one port must not take the descriptors the others need: the soft limit is
    # raised to the hard one, and the loop's errors (accept failures) logged at a bound rate.
    soft, hard = raise_fd_limit()
    log.info("silo_fd_limit", soft=soft, hard=hard)
    limit_loop_error_logs(asyncio.get_running_loop(), RateLimitedLog(log))
    silo = Silo(options, modules=app_modules, stream_providers=dict(stream_providers or {}),
                spark=spark)
    if filters:
        incoming, outgoing = resolve_filters(filters)
        for fn in incoming:
            silo.add_call_filter(fn)
        for fn in outgoing:
            silo.add_call_filter(fn, outgoing=True)
    for module in app_modules:
        if not any(info.cls.__module__ == module for info in silo.registry.values()):
            raise ConfigurationError(
                f"--app {module}: the module defines no Grain subclass (classes it only "
                "imports are not hosted); name the module that defines them"
            )

    # Every silo hosts the probe's consumer grain, so that a silo owning the queue of a
    # probe stream (which another silo's prober publishes to) can deliver to it: the
    # silos of a cluster host the same grain classes.
    silo.register_grain_class(ProbeConsumer)
    if prober is not None:
        install_prober(silo, *prober)
    ops = install_ops_server(silo, *dashboard) if dashboard is not None else None

    loop = asyncio.get_running_loop()
    stop_requested = asyncio.Event()
    forced = asyncio.Event()
    received: list[signal.Signals] = []

    def on_signal(sig: signal.Signals) -> None:
        received.append(sig)
        if len(received) == 1:
            log.info("silo_signal_received", signal=sig.name, action="graceful_stop")
            stop_requested.set()
        else:
            log.warning("silo_signal_received", signal=sig.name, action="forced_exit")
            forced.set()

    installed = _install_signal_handlers(loop, on_signal, signals)
    try:
        if not await _start(silo, stop_requested, forced, log):
            return 1 if forced.is_set() else 0
        gateway = silo.gateway.address if silo.gateway is not None else None
        log.info(
            "silo_ready", gateway=gateway,
            grain_types=sorted(t for t, i in silo.registry.items() if not i.runtime),
            app=list(app_modules), data_dir=options.data_dir, storage=options.storage,
            reminders=options.reminders, dashboard=ops.address if ops is not None else None,
        )
        if on_ready is not None:
            on_ready(silo)
        async with asyncio.TaskGroup() as tg:
            waits = [tg.create_task(stop_requested.wait()), tg.create_task(silo.wait_stopped())]
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for task in waits:
                task.cancel()
        return await _stop(silo, forced, log)
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


async def _start(silo: Silo, stop_requested: asyncio.Event, forced: asyncio.Event,
                 log: Any) -> bool:
    """Start the silo; False if a signal came first. The start is then cancelled, which
    rolls back every stage that had started (a second signal stops waiting for that). A
    failed start raises its error, after its own rollback."""
    starting = asyncio.ensure_future(silo.start())
    signalled = asyncio.ensure_future(stop_requested.wait())
    try:
        await asyncio.wait([starting, signalled], return_when=asyncio.FIRST_COMPLETED)
    finally:
        signalled.cancel()
    if starting.done():
        starting.result()  # a failed start raises here
        return True
    log.info("silo_start_interrupted", action="rollback")
    starting.cancel()
    forcing = asyncio.ensure_future(forced.wait())
    try:
        await asyncio.wait([starting, forcing], return_when=asyncio.FIRST_COMPLETED)
    finally:
        forcing.cancel()
    if starting.done() and not starting.cancelled():
        starting.exception()  # retrieved: the signal, not this error, ends the process
    log.info("silo_exited", code=1 if forced.is_set() else 0)
    return False


async def _stop(silo: Silo, forced: asyncio.Event, log: Any) -> int:
    """Stop the silo; a forced exit or an overrun abandons the shutdown with code 1."""
    limit = silo.options.shutdown_timeout * 2 + 5
    stopping = asyncio.ensure_future(silo.stop())
    forcing = asyncio.ensure_future(forced.wait())
    try:
        with contextlib.suppress(TimeoutError):
            async with silo.clock.timeout(limit):
                await asyncio.wait([stopping, forcing], return_when=asyncio.FIRST_COMPLETED)
    finally:
        forcing.cancel()
        await asyncio.gather(forcing, return_exceptions=True)
    if stopping.done():
        exc = stopping.exception()
        if exc is None:
            log.info("silo_exited", code=0)
            return 0
        log.error("silo_stop_failed", error=repr(exc), exc_info=exc)
        return 1
    if forced.is_set():
        log.warning("silo_forced_exit", code=1)
    else:
        log.error("silo_stop_timeout", seconds=limit, code=1)
    stopping.cancel()
    # Give the interrupted shutdown a moment to unwind; asyncio.wait never raises for it.
    with contextlib.suppress(TimeoutError):
        async with silo.clock.timeout(FORCED_EXIT_GRACE):
            await asyncio.wait([stopping])
    if stopping.done() and not stopping.cancelled():
        stopping.exception()  # retrieved: already reported by the exit code
    return 1
