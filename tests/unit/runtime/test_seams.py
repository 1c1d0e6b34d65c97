"""The runtime's components work from the narrow dependencies the silo hands them.

Catalog, dispatcher and locator run here around a small host that is not a ``Silo``; no
component module imports the silo; generated reference classes live with their class's
metadata.
"""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from typing import Any

import pytest

from orleanspy import Grain
from orleanspy._util.clock import Clock
from orleanspy.diagnostics import Diagnostics
from orleanspy.grains.interface import GrainClassInfo, class_info
from orleanspy.grains.proxy import make_reference
from orleanspy.grains.state import PersistentState, StateSpec
from orleanspy.ids import GrainId
from orleanspy.logging import get_logger
from orleanspy.messaging.codec import Codec
from orleanspy.runtime.call_stats import CallStatistics
from orleanspy.runtime.catalog import Catalog
from orleanspy.runtime.dispatcher import Dispatcher
from orleanspy.runtime.locator import LocalLocator
from orleanspy.runtime.options import SiloOptions
from orleanspy.testing import FakeClock

RUNTIME = Path(__file__).resolve().parents[3] / "orleanspy" / "runtime"
#: The silo itself (the core the builder composes) and the client gateway.
ROOTS = {"silo.py", "gateway.py"}


class Adder(Grain):
    async def add(self, a: int, b: int) -> int:
        await asyncio.sleep(0)
        return a + b


class _Host:
    """What the components read from their silo, without a silo."""

    def __init__(self, clock: Clock) -> None:
        self.name = "host:1"
        self.options = SiloOptions(gateway_port=None)
        self.clock = clock
        self.diagnostics = Diagnostics()
        self.log = get_logger("tests.seams")
        self.loop = asyncio.get_running_loop()
        self.started = True
        self.stopping = False
        self.tasks: set[asyncio.Task[Any]] = set()
        self.registry: dict[str, GrainClassInfo] = {}
        self.locator = LocalLocator(self)
        self.catalog = Catalog(self, self.registry)
        self.dispatcher = Dispatcher(self, self.catalog, self.locator, Codec(None), clock=clock,
                                     default_timeout=self.options.response_timeout)
        self.call_statistics = CallStatistics()

    def track(self, task: asyncio.Task[Any]) -> None:
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def make_state(self, spec: StateSpec[Any], grain_id: GrainId) -> PersistentState[Any]:
        raise AssertionError("no grain here declares state")

    def log_grain_error(self, event: str, **fields: Any) -> None:
        self.log.debug(event, **fields)


async def test_catalog_and_dispatcher_run_without_a_silo() -> None:
    host = _Host(FakeClock())
    info = class_info(Adder)
    host.registry[info.type_name] = info
    gid = GrainId(info.type_name, "a")
    assert await host.dispatcher.call(gid, "add", (2, 3), None, None) == 5
    act = host.catalog.get(gid)
    assert act is not None and act.silo is host
    assert await host.dispatcher.call(gid, "add", (4, 5), None, None) == 9
    assert len(host.catalog) == 1


def _imports(tree: ast.AST) -> list[str]:
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return names


@pytest.mark.parametrize(
    "module", sorted(p.name for p in RUNTIME.glob("*.py") if p.name not in ROOTS)
)
def test_runtime_components_do_not_import_the_silo(module: str) -> None:
    tree = ast.parse((RUNTIME / module).read_text())
    assert "orleanspy.runtime.silo" not in _imports(tree)
    guarded = [
        node for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
    ]
    for block in guarded:
        inner = [name for name in _imports(block) if name.startswith("orleanspy.runtime")]
        assert not inner, f"{module} imports {inner} only for type checking"


def test_the_reference_class_lives_on_the_class_info() -> None:
    runtime: Any = object()
    first = make_reference(runtime, Adder, "x")
    second = make_reference(runtime, Adder, "y")
    assert type(first) is type(second) is class_info(Adder).reference
