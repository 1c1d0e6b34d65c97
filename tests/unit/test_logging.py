"""get_logger(): lazy loggers follow the structlog configuration made after they were created."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import structlog
from structlog.testing import CapturedCall, CapturingLoggerFactory

from orleanspy.logging import get_logger

# Created at import time, before any test configures structlog (as library modules do).
module_log = get_logger("tests.unit.test_logging", component="module")


@pytest.fixture
def capturing() -> Iterator[CapturingLoggerFactory]:
    """structlog configured to render key=value lines at info into a capturing factory."""
    previous = structlog.get_config()
    factory = CapturingLoggerFactory()
    structlog.configure(
        processors=[structlog.processors.KeyValueRenderer(sort_keys=True)],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=factory,
        cache_logger_on_first_use=False,
    )
    try:
        yield factory
    finally:
        structlog.configure(**previous)


def test_logging_module_level_logger_honours_later_configuration(capturing):
    module_log.debug("below_the_level")
    module_log.info("queue_started", queue=3)

    assert capturing.logger.calls == [
        CapturedCall(
            "info", ("component='module' event='queue_started' logger='tests.unit.test_logging' "
                     "queue=3",), {},
        )
    ]


def test_logging_logger_created_before_configure_honours_it():
    previous = structlog.get_config()
    structlog.reset_defaults()
    log = get_logger("orleanspy.early", silo="s1")
    factory = CapturingLoggerFactory()
    structlog.configure(
        processors=[structlog.processors.KeyValueRenderer(sort_keys=True)],
        logger_factory=factory,
    )
    try:
        log.bind(grain="g").warning("late_configuration")
    finally:
        structlog.configure(**previous)

    assert factory.logger.calls == [
        CapturedCall(
            "warning", ("event='late_configuration' grain='g' logger='orleanspy.early' "
                        "silo='s1'",), {},
        )
    ]


def test_logging_without_configuration_drops_debug_lines_and_keeps_info(capsys):
    """A script that only uses a client (and never configures structlog) sees the library's
    info and warnings, not its debug lines (structlog's own default prints every level)."""
    previous = structlog.get_config()
    structlog.reset_defaults()
    log = get_logger("orleanspy.client", client="c1")
    try:
        log.debug("client_gateway_connected", gateway="127.0.0.1:30000")
        log.bind(gateway="g").info("client_connected")
    finally:
        structlog.configure(**previous)
    out = capsys.readouterr().out
    assert "client_gateway_connected" not in out
    assert "client_connected" in out
