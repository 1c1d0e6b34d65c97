"""get_logger(): structlog loggers for library code (never configures structlog)."""

from __future__ import annotations

from typing import Any, cast

# The lazy proxy ``structlog.get_logger()`` returns, built directly: ``get_logger`` passes its
# initial values through ``wrap_logger(logger, ..., **values)``, where a ``logger`` value
# collides with the wrapped-logger parameter.
from structlog._config import BoundLoggerLazyProxy
from structlog.typing import FilteringBoundLogger

__all__ = ["get_logger"]


def get_logger(name: str, **context: Any) -> FilteringBoundLogger:
    """Return a lazy structlog logger with ``logger=name`` and ``context`` bound.

    The logger assembles itself from the structlog configuration on first use (and on every
    use unless the configuration caches loggers), so a module-level ``log = get_logger(...)``
    follows a configuration made after the module was imported; ``bind()`` assembles a logger
    from the configuration of that moment. Configuration (console or JSON rendering, level)
    belongs to the silo host (``silo/startup.py``) or to the application; library code only
    logs.

    The static type is the filtering bound logger that ``silo/startup.py`` configures
    (``structlog.make_filtering_bound_logger``); ``bind()`` returns the same type.
    """
    proxy = BoundLoggerLazyProxy(
        None, initial_values={"logger": name, **context}, logger_factory_args=(name,)
    )
    return cast(FilteringBoundLogger, proxy)
