"""CPU time a gateway silo spends per forwarded call, in one process, without sockets.

Usage::

    .venv/bin/python benchmarks/forwarding.py            # an int result, no argument
    .venv/bin/python benchmarks/forwarding.py --payload  # a 20-map argument and result

Two silos of one process form a cluster (memory membership table); silo B hosts the grains,
silo A is the gateway. A client connection to A's gateway and A's connection to B are given
in-memory transports, so what is timed is A's own work per call: read the client's request,
route it, write it to B; read B's response, write it to the client. Rounds of 100 requests
(100 calls in flight), then their 100 responses; the figure is the median of the rounds'
``time.process_time()`` per call (garbage collection off), which a loaded machine disturbs
far less than a throughput ratio. ``benchmarks/cluster.py`` measures the same path over
real sockets (row ``client_to_remote_grain_100_in_flight``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
from typing import Any

from _common import progress, quiet_logging

from orleanspy import Grain, Silo, SiloOptions, grain_type
from orleanspy.cluster.membership import MemoryMembershipTable
from orleanspy.cluster.membership.service import MembershipService
from orleanspy.messaging.bodies import encode_body, reply_frame
from orleanspy.messaging.frames import Request
from orleanspy.runtime.gateway import GatewayConnection

CALLS_IN_FLIGHT = 100
ROUNDS = 400


@grain_type("BenchTarget")
class Target(Grain):
    async def increment(self, *args: Any) -> int:
        return 1


class _Memory(asyncio.Transport):
    """A transport that keeps what is written."""

    def __init__(self) -> None:
        super().__init__()
        self.data = bytearray()

    def write(self, data: Any) -> None:
        self.data += data

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def close(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def frames(self) -> list[bytes]:
        out, pos, buf = [], 0, self.data
        while pos < len(buf):
            size = int.from_bytes(buf[pos:pos + 4], "big")
            out.append(bytes(buf[pos + 4:pos + 4 + size]))
            pos += 4 + size
        buf.clear()
        return out


def _options(gateway: bool) -> SiloOptions:
    return SiloOptions(
        membership="memory", port=0, gateway_port=0 if gateway else None, cluster_id="bench",
        collection_quantum=3600.0, probe_period=2.0, i_am_alive_period=2.0,
        table_refresh_period=1.0,
    )


async def measure(payload: bool) -> float:
    # The timed loop never yields to the event loop, so membership cannot confirm this silo
    # meanwhile and would fence it: fencing is not what is measured here.
    MembershipService.fenced = lambda self: False  # type: ignore[method-assign]
    table = MemoryMembershipTable()
    b = Silo(_options(False), grains=[Target], membership_table=table)
    await b.start()
    a = Silo(_options(True), grains=[Target], membership_table=table)
    await a.start()
    try:
        for silo in (a, b):
            assert silo.cluster is not None
            await silo.cluster.wait_for_view(lambda v: len(v.active_silos) == 2, 30)
        for i in range(CALLS_IN_FLIGHT):
            await b.get_grain(Target, i).increment()  # placed on B (prefer-local)
            await a.get_grain(Target, i).increment()  # A's directory cache knows B
        assert a.cluster is not None and a.gateway is not None
        to_b = a.cluster.transport._conns[b.address]
        wire_b = _Memory()
        to_b.transport = wire_b
        client = GatewayConnection(a.gateway)
        wire_client = _Memory()
        client.connection_made(wire_client)
        client.mark_ready()
        codec = a.codec
        value: Any = ([{"i": k, "name": f"item-{k}", "tags": ["a", "b"], "at": 1.5}
                       for k in range(20)] if payload else 1)
        args = (value,) if payload else ()
        body = encode_body(codec, args, None)
        rounds = [[Request.pack(codec, False, r * CALLS_IN_FLIGHT + i + 1, "BenchTarget", i,
                                "increment", 30.0, [], 0, True, body)
                   for i in range(CALLS_IN_FLIGHT)] for r in range(ROUNDS)]
        spent: list[float] = []
        gc.collect()
        gc.disable()
        try:
            for requests in rounds:
                t0 = time.process_time()
                for frame in requests:
                    client.frame_received(frame)
                to_b._flush()
                used = time.process_time() - t0
                responses = [reply_frame(codec, codec.unpackb(f)[1], True, value)
                             for f in wire_b.frames()]
                t0 = time.process_time()
                for frame in responses:
                    to_b.frame_received(frame)
                client._flush()
                spent.append(used + time.process_time() - t0)
                answered = wire_client.frames()
                assert len(answered) == CALLS_IN_FLIGHT
                assert all(codec.unpackb(f)[2] is True for f in answered), "a call failed"
        finally:
            gc.enable()
        client.close()
    finally:
        await a.stop()
        await b.stop()
    spent.sort()
    return spent[len(spent) // 2] / CALLS_IN_FLIGHT


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--payload", action="store_true",
                        help="a list of 20 maps as the argument and the result")
    args = parser.parse_args()
    quiet_logging()
    progress("two silos in this process; timing silo A's work per forwarded call ...")
    per_call = asyncio.run(measure(args.payload))
    kind = "20-map argument and result" if args.payload else "no argument, int result"
    print(f"gateway silo CPU per forwarded call ({kind}): {per_call * 1e6:.2f} us")


if __name__ == "__main__":
    main()
