"""get_logger(): structlog loggers for library code (never configures structlog)."""

from __future__ import annotations

import logging
from typing import Any, cast

import structlog

# The lazy proxy ``structlog.get_logger()`` returns, built directly: ``get_logger`` passes its
# initial values through ``wrap_logger(logger, ..., **values)``, where a ``logger`` value
# collides with the wrapped-logger parameter.
from structlog._config import BoundLoggerLazyProxy
from structlog.typing import BindableLogger, FilteringBoundLogger

__all__ = ["get_logger"]

#: What library loggers write while nobody has configured structlog (a script that only
#: uses a ``ClusterClient``): info and above. structlog's own default writes every level,
#: and the library's debug lines (each gateway connection) are not for such a script.
_UNCONFIGURED = structlog.make_filtering_bound_logger(logging.INFO)


class _LibraryLogger(BoundLoggerLazyProxy):
    """A lazy logger that drops debug lines until structlog is configured; once it is
    (``silo/startup.py``, or the application), the configuration decides alone."""

    def bind(self, **new_values: Any) -> BindableLogger:
        self._wrapper_class = None if structlog.is_configured() else _UNCONFIGURED
        return super().bind(**new_values)


def get_logger(name: str, **context: Any) -> FilteringBoundLogger:
    """Return a lazy structlog logger with ``logger=name`` and ``context`` bound.

    The logger assembles itself from the structlog configuration on first use (and on every
    use unless the configuration caches loggers), so a module-level ``log = get_logger(...)``
    follows a configuration made after the module was imported; ``bind()`` assembles a logger
    from the configuration of that moment. Configuration (console or JSON rendering, level)
    belongs to the silo host (``silo/startup.py``) or to the application; library code only
    logs. Until structlog is configured, debug lines are dropped (structlog's default would
    print them): a client script shows the library's info, warnings and errors.

    The static type is the filtering bound logger that ``silo/startup.py`` configures
    (``structlog.make_filtering_bound_logger``); ``bind()`` returns the same type.
    """
    proxy = _LibraryLogger(
        None, initial_values={"logger": name, **context}, logger_factory_args=(name,)
    )
    return cast(FilteringBoundLogger, proxy)
