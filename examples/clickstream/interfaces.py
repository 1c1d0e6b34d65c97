"""The clickstream pipeline's grain interfaces and shared names: what a client imports.

``examples.clickstream.grains`` implements them on the silo; ``examples/clickstream/client.py``
calls them without importing that module (nor Spark).
"""

from __future__ import annotations

from typing import Any, Protocol

from orleanspy import GrainInterface, grain_type

NAMESPACE = "pageviews"
PAGES = ("/", "/pricing", "/docs", "/docs/api", "/blog", "/signup", "/about", "/careers")
#: Where the sink lands the views, relative to the silo's data folder.
LAKE = f"lake/{NAMESPACE}"
#: The durable stream provider that keeps a copy of the views for Spark's streaming source:
#: its SQLite file in the silo's data folder, and its queues.
VIEWS_DB = "views.db"
VIEWS_QUEUES = 4
#: its namespace (no grain subscribes to it: its events are kept for Spark by the provider's
#: retention)
VIEWS_NAMESPACE = "views"


@grain_type("PageCounter")
class IPageCounter(GrainInterface, Protocol):
    """Real-time views of one page (keyed by the page)."""

    async def record(self, count: int = 1) -> None: ...

    async def total(self) -> int: ...


@grain_type("Tally")
class ITally(GrainInterface, Protocol):
    """How far the pipeline got (key ``"all"``)."""

    async def add(self, counted: int = 0, landed: int = 0) -> None: ...

    async def wait_for(self, expected: int) -> dict[str, int]:
        """Return ``{"counted": n, "landed": m}`` once ``expected`` views are both."""
        ...


@grain_type("ClickAnalytics")
class IClickAnalytics(GrainInterface, Protocol):
    """Batch analytics over the landed page views (a Spark grain)."""

    async def report(self, path: str = LAKE, top_n: int = 5) -> dict[str, Any]:
        """Top pages, unique visitors, sessions per hour and per-page totals, read from the
        durable ``views`` stream with Spark's orleanspy source; and the per-page totals of
        the Parquet files under ``path`` (relative to the silo's data folder, or absolute),
        which must agree."""
        ...
