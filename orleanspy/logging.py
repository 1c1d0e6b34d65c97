"""get_logger(): structlog loggers for library code (never configures structlog)."""

from __future__ import annotations

from typing import Any

import structlog

__all__ = ["get_logger"]


def get_logger(name: str, **context: Any) -> Any:
    """Return a structlog logger bound with ``logger=name`` and ``context``.

    Configuration (console or JSON rendering, level) belongs to the silo host
    (``silo/startup.py``) or to the application; library code only logs.
    """
    return structlog.get_logger(name).bind(logger=name, **context)
