"""pytest plugin (entry point ``orleanspy``): the ``orleanspy_cluster`` fixture factory."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

__all__: list[str] = []

try:
    import pytest_asyncio

    _HAVE_PYTEST_ASYNCIO = True
except ImportError:  # pragma: no cover - the fixture needs pytest-asyncio
    _HAVE_PYTEST_ASYNCIO = False

if _HAVE_PYTEST_ASYNCIO:

    @pytest_asyncio.fixture
    async def orleanspy_cluster() -> AsyncIterator[Callable[..., Awaitable[Any]]]:
        """Factory: ``cluster = await orleanspy_cluster(grains=[...])`` (one silo) or
        ``await orleanspy_cluster(grains=[...], silos=3)`` (a cluster of three in-process
        silos; see ``TestCluster``); every cluster made is stopped after the test."""
        from orleanspy.testing.cluster import TestCluster

        started: list[TestCluster] = []

        async def make(*args: Any, **kwargs: Any) -> TestCluster:
            cluster = TestCluster(*args, **kwargs)
            await cluster.start()
            started.append(cluster)
            return cluster

        yield make
        for cluster in reversed(started):
            await cluster.stop()
