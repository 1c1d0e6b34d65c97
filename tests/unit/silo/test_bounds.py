"""The operations server's bounds and the rate-limited log of a silo process."""

from __future__ import annotations

import asyncio
from typing import Any

from silo.dashboard.bounds import (
    FD_RESERVE,
    LOG_BURST,
    OPS_MAX_CONNECTIONS,
    RateLimitedLog,
    limit_loop_error_logs,
    ops_connection_cap,
)


class Lines:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.lines.append((event, fields))


def test_the_cap_leaves_the_reserve() -> None:
    assert ops_connection_cap(1 << 20) == OPS_MAX_CONNECTIONS
    assert ops_connection_cap(1024) == min(OPS_MAX_CONNECTIONS, (1024 - FD_RESERVE) // 4)
    assert ops_connection_cap(256) == 8


def test_a_flood_of_one_event_logs_a_bounded_number_of_lines_then_counts() -> None:
    now = [0.0]
    sink = Lines()
    log = RateLimitedLog(sink, clock=lambda: now[0])
    for _ in range(1000):
        log.warning("ops_connection_closed", reason="x")
        log.warning("other", reason="y")
    assert len(sink.lines) == 2 * LOG_BURST
    now[0] = 1.5
    log.warning("ops_connection_closed", reason="x")
    assert sink.lines[-1] == ("ops_connection_closed",
                              {"reason": "x", "suppressed": 1000 - LOG_BURST})


async def test_accept_errors_of_the_loop_are_rate_limited_per_message() -> None:
    sink = Lines()
    loop = asyncio.get_running_loop()
    old = loop.get_exception_handler()
    limit_loop_error_logs(loop, RateLimitedLog(sink))
    try:
        for _ in range(500):
            loop.call_exception_handler({"message": "socket.accept() out of system resource",
                                         "exception": OSError(24, "Too many open files")})
        loop.call_exception_handler({"message": "a callback failed",
                                     "exception": RuntimeError("boom")})
    finally:
        loop.set_exception_handler(old)
    accepts = [f for e, f in sink.lines if f["message"].startswith("socket.accept()")]
    assert len(accepts) == LOG_BURST and "exc_info" not in accepts[0]
    assert sink.lines[-1][1]["exc_info"].args == ("boom",)
