"""Silos and clients on uvloop's event loop, which uvicorn and many services run: its
transports are not subclasses of ``asyncio.Transport``, and the runtime does not ask them
to be."""

from __future__ import annotations

import asyncio

import pytest

from orleanspy import Grain, placement
from orleanspy.grains.interface import type_name_of
from orleanspy.ids import GrainId
from orleanspy.testing import TestCluster

uvloop = pytest.importorskip("uvloop", reason="uvloop (the dev extra) is not installed")


@placement("random")
class Tally(Grain):
    def __init__(self) -> None:
        self.total = 0

    async def add(self, n: int) -> int:
        self.total += n
        return self.total


def test_a_cluster_and_its_client_run_on_uvloop() -> None:
    async def main() -> None:
        assert isinstance(asyncio.get_running_loop(), uvloop.Loop)
        async with asyncio.timeout(30), TestCluster([Tally], silos=2) as cluster:
            refs = [cluster.client.get_grain(Tally, k) for k in range(40)]
            assert await asyncio.gather(*(r.add(1) for r in refs)) == [1] * 40
            assert await asyncio.gather(*(r.add(2) for r in refs)) == [3] * 40
            # placed at random on both silos: the client's gateway forwards some of them
            hosted = [sum(GrainId(type_name_of(Tally), k) in silo.catalog.activations
                          for k in range(40)) for silo in cluster.silos]
            assert sum(hosted) == 40 and min(hosted) > 0, hosted

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())
