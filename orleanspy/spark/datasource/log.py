"""The data source's logger, imported on first use: a Spark Python process that plans or
reads a stream and logs nothing does not import the logging stack (structlog and what it
pulls in cost about as much as the rest of the reader's imports)."""

from __future__ import annotations

from typing import Any


def logger(name: str) -> Any:
    """``orleanspy.logging.get_logger(name)``, its module imported now."""
    from orleanspy.logging import get_logger

    return get_logger(name)
