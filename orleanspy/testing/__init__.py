"""Test helpers for users' own suites: an in-process cluster, a fake clock, event waits.

Example (pytest with pytest-asyncio)::

    async def test_counter(orleanspy_cluster):
        cluster = await orleanspy_cluster(grains=[Counter])
        assert await cluster.client.get_grain(Counter, "a").increment() == 1
"""

from orleanspy.testing.clock import FakeClock
from orleanspy.testing.cluster import TestCluster
from orleanspy.testing.events import EventCollector, EventRecorder

__all__ = ["EventCollector", "EventRecorder", "FakeClock", "TestCluster"]
