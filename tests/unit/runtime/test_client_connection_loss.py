"""A client call on a connection lost while paused fails fast.

Bounded by ``asyncio.timeout`` (or a call timeout where the failure would be a hang);
waits on probe events and runtime state, never on sleeps.
"""

from __future__ import annotations

import asyncio

from orleanspy import (
    SiloUnavailableError,
)
from tests.unit.runtime.echo_grain import Echo

WAIT = 5.0


# A call resumed after wait_writable on a dead connection fails fast
async def test_client_call_on_connection_lost_while_paused_fails_fast(make_cluster, probe):
    cluster = await make_cluster(Echo)
    client = cluster.client
    conn = client._conn
    conn.pause_writing()  # as if the silo stopped reading
    call = asyncio.create_task(client.get_grain(Echo, "k").with_timeout(2.0).ping())
    await probe.until(lambda: conn._write_resumed is not None)
    conn.close()
    async with asyncio.timeout(WAIT):
        try:
            result = await call
        except SiloUnavailableError:
            result = "unavailable"
    assert result in ("pong", "unavailable")
