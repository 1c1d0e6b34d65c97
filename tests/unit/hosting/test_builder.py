"""The silo builder is the one place a silo's components are created.

Each component class's constructor is wrapped for the test and records the module that
called it; a lone silo and a cluster of two silos then start, serve calls and stop. Every
component must have been built, and by ``orleanspy.hosting.builder`` alone. A source scan
checks that no module wires components by a base-class hook or a setter after construction.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orleanspy import Grain, Silo, SiloOptions
from orleanspy._util.lifecycle import Lifecycle
from orleanspy.cluster.directory import GrainDirectory
from orleanspy.cluster.membership.service import MembershipService
from orleanspy.cluster.membership.sqlite import SqliteMembershipTable
from orleanspy.cluster.ops import SiloOperations
from orleanspy.cluster.placement import PlacementDirector
from orleanspy.cluster.registrations import DirectoryRegistrations
from orleanspy.cluster.runtime import ClusterRuntime
from orleanspy.cluster.transport import SiloTransport
from orleanspy.cluster.view import ClusterView
from orleanspy.grains.interface import PlacementStrategy, placement
from orleanspy.grains.proxy import References
from orleanspy.reminders.memory import MemoryReminderTable
from orleanspy.reminders.service import ReminderService
from orleanspy.runtime.catalog import Catalog
from orleanspy.runtime.collector import ActivationCollector
from orleanspy.runtime.dispatcher import Dispatcher
from orleanspy.runtime.gateway import Gateway
from orleanspy.runtime.identity import SiloIdentity
from orleanspy.runtime.locator import LocalLocator
from orleanspy.spark.options import SparkOptions
from orleanspy.spark.session import SparkSessionManager
from orleanspy.storage.memory import MemoryGrainStorage
from orleanspy.streams.adapters import MemoryAdapterFactory
from orleanspy.streams.leases import SqliteQueueLeaseStore
from orleanspy.streams.options import StreamProviderOptions
from orleanspy.streams.provider import PersistentStreamProvider

BUILDER = "orleanspy.hosting.builder"
WAIT = 20.0

#: Built for every silo.
EVERY_SILO: tuple[type, ...] = (
    SiloIdentity, Lifecycle, Catalog, Dispatcher, References, ActivationCollector, Gateway,
    ReminderService, MemoryGrainStorage, MemoryReminderTable,
)
LONE: tuple[type, ...] = (*EVERY_SILO, LocalLocator, SparkSessionManager)
CLUSTERED: tuple[type, ...] = (
    *EVERY_SILO, SqliteMembershipTable, ClusterView, SiloTransport, GrainDirectory,
    PlacementDirector, DirectoryRegistrations, ClusterRuntime, MembershipService,
    SiloOperations, SqliteQueueLeaseStore,
)


@placement(PlacementStrategy.HASH_BASED)
class Echo(Grain):
    async def where(self, value: int) -> tuple[int, str]:
        return value, self.silo.name


Constructions = list[tuple[type, str]]


@pytest.fixture
def constructions(monkeypatch: pytest.MonkeyPatch) -> Callable[[tuple[type, ...]], Constructions]:
    """``watch(classes)``: from now on, each construction of one of ``classes`` is recorded
    as (class, the module that called its constructor)."""
    seen: Constructions = []

    def watch(classes: tuple[type, ...]) -> Constructions:
        for cls in classes:
            original = cls.__init__

            def init(self: Any, *args: Any, __cls: type = cls, __init: Any = original,
                     **kwargs: Any) -> None:
                if type(self) is __cls:
                    seen.append((__cls, sys._getframe(1).f_globals["__name__"]))
                __init(self, *args, **kwargs)

            monkeypatch.setattr(cls, "__init__", init)
        return seen

    return watch


def _check(seen: Constructions, expected: tuple[type, ...]) -> None:
    elsewhere = sorted({f"{cls.__name__} by {module}" for cls, module in seen
                        if module != BUILDER})
    assert elsewhere == [], "components built outside the builder"
    missing = sorted(cls.__name__ for cls in expected if cls not in {c for c, _ in seen})
    assert missing == [], "components the silo should have built"


def _provider() -> PersistentStreamProvider:
    return PersistentStreamProvider(MemoryAdapterFactory(),
                                    StreamProviderOptions(pull_period=0.05))


async def test_a_lone_silo_is_built_by_the_builder_alone(
    constructions: Callable[[tuple[type, ...]], Constructions],
) -> None:
    seen = constructions(LONE)
    async with Silo(SiloOptions(gateway_port=0), grains=[Echo],
                    stream_providers={"s": _provider()}, spark=SparkOptions()) as silo:
        assert await silo.get_grain(Echo, "a").where(1) == (1, silo.name)
        stream = silo.get_stream_provider("s").get_stream("ns", "k")
        await stream.on_next(1)
    _check(seen, LONE)


async def test_a_cluster_silo_is_built_by_the_builder_alone(
    constructions: Callable[[tuple[type, ...]], Constructions], tmp_path: Path,
) -> None:
    seen = constructions(CLUSTERED)
    options = SiloOptions(port=0, gateway_port=0, cluster_key="builder-test-cluster-key",
                          membership=f"sqlite:{tmp_path / 'cluster.db'}")
    a = Silo(options, grains=[Echo], stream_providers={"s": _provider()})
    b = Silo(options, grains=[Echo], stream_providers={"s": _provider()})
    async with a, b:
        await a.cluster.wait_for_view(lambda view: len(view.active_silos) == 2, WAIT)
        await b.cluster.wait_for_view(lambda view: len(view.active_silos) == 2, WAIT)
        answers = [await a.get_grain(Echo, str(i)).where(i) for i in range(32)]
        assert [value for value, _ in answers] == list(range(32))
        assert {name for _, name in answers} == {a.name, b.name}  # calls crossed silos
    _check(seen, CLUSTERED)


#: Wiring the builder replaces: a base-class hook, a component swapped or set on another.
_WIRING = re.compile(
    r"def _build_\w*\("
    r"|(?<!self)\.reroute = "
    r"|\.handlers\[[^]]+\] = "
    r"|\bsilo\.(gateway|reminders|cluster|catalog|dispatcher|locator) = "
    r"|self\.(directory|placement|transport) = (?!directory\b|placement\b|transport\b)"
)


def test_no_module_wires_components_by_hook_or_setter() -> None:
    root = Path(__file__).resolve().parents[3] / "orleanspy"
    found = [
        f"{path.relative_to(root)}:{n}: {line.strip()}"
        for path in sorted(root.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if _WIRING.search(line)
    ]
    assert found == []
