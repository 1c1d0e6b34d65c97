"""TypePolicy: names from bytes resolve only to allowed classes of already imported modules,
without imports or attribute hooks; what does not resolve arrives as a plain value."""

from __future__ import annotations

import dataclasses
import enum
import subprocess
import sys
import types
from collections.abc import Iterator

import msgpack
import pytest

from orleanspy import Grain, RemoteGrainError, serializable
from orleanspy.messaging.codec import EXT_DATACLASS, EXT_ENUM, EXT_EXCEPTION, Codec
from orleanspy.messaging.types import TypePolicy
from orleanspy.messaging.wire import decode_error, encode_error


def ext(code: int, *fields: object) -> bytes:
    return msgpack.packb(msgpack.ExtType(code, msgpack.packb(list(fields))))


def test_a_lazy_module_attribute_is_never_triggered() -> None:
    """``concurrent.futures`` imports ``ProcessPoolExecutor`` (and multiprocessing) lazily, on
    attribute access: naming it must import nothing, under any policy and in every path."""
    script = """
import sys, concurrent.futures, msgpack
from orleanspy.messaging.codec import Codec, EXT_DATACLASS, EXT_EXCEPTION
from orleanspy.messaging.types import TypePolicy
from orleanspy.messaging.wire import decode_error
before = set(sys.modules)
name = "concurrent.futures:ProcessPoolExecutor"
for policy in (TypePolicy(), TypePolicy.local()):
    assert policy.resolve(name) is None
    codec = Codec(policy=policy)
    for code, fields in ((EXT_DATACLASS, [name, {}]), (EXT_EXCEPTION, [name, [], "x"])):
        codec.unpackb(msgpack.packb(msgpack.ExtType(code, msgpack.packb(fields))))
    decode_error({"type": name, "args": [], "message": "x", "tb": ""}, policy)
new = sorted(set(sys.modules) - before)
assert not new, new
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def test_a_module_not_imported_is_not_imported() -> None:
    name = "xml.dom.minidom:Node"
    script = f"""
import sys
from orleanspy.messaging.types import TypePolicy
assert "xml.dom.minidom" not in sys.modules
assert TypePolicy.local().resolve({name!r}) is None
assert "xml.dom.minidom" not in sys.modules
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def app() -> Iterator[types.SimpleNamespace]:
    """Two synthetic modules: ``app_models`` (types) and ``app_grains`` (a grain using some)."""
    models = types.ModuleType("app_models")
    grains = types.ModuleType("app_grains")
    sys.modules["app_models"] = models
    sys.modules["app_grains"] = grains

    @dataclasses.dataclass
    class Line:
        sku: str

    @dataclasses.dataclass
    class Order:
        lines: list[Line]

    @dataclasses.dataclass
    class Unused:
        x: int

    class Color(enum.Enum):
        RED = "red"

    class Refused(Exception):
        pass

    for cls in (Line, Order, Unused, Color, Refused):
        cls.__module__ = "app_models"
        cls.__qualname__ = cls.__name__
        setattr(models, cls.__name__, cls)

    class Shop(Grain):
        async def place(self, order: Order | None) -> Color:
            return Color.RED

    Shop.place.__annotations__ = {"order": Order | None, "return": Color}
    Shop.__module__ = "app_grains"
    Shop.__qualname__ = "Shop"
    grains.Shop = Shop  # type: ignore[attr-defined]
    yield types.SimpleNamespace(Line=Line, Order=Order, Unused=Unused, Color=Color,
                                Refused=Refused, Shop=Shop)
    del sys.modules["app_models"], sys.modules["app_grains"]


def test_types_reachable_from_a_grain_s_annotations_are_allowed(app: types.SimpleNamespace
                                                                 ) -> None:
    policy = TypePolicy()
    codec = Codec(policy=policy)
    local = Codec()
    order = app.Order([app.Line("a")])
    assert codec.unpackb(local.packb(order)) == {"lines": [{"sku": "a"}]}  # nothing allowed yet
    policy.allow_grain_class(app.Shop, ["place"])
    assert codec.unpackb(local.packb(order)) == order
    assert codec.unpackb(local.packb(app.Color.RED)) is app.Color.RED
    # a type of the same module that no annotation names stays plain
    assert codec.unpackb(local.packb(app.Unused(1))) == {"x": 1}
    assert local.unpackb(local.packb(app.Unused(1))) == app.Unused(1)  # the local policy


def test_a_grain_s_own_module_is_allowed(app: types.SimpleNamespace) -> None:
    policy = TypePolicy()
    policy.allow_grain_class(app.Shop, [])
    assert policy.resolve("app_grains:Shop") is app.Shop
    assert policy.resolve("app_models:Unused") is None


def test_serializable_allows_a_class_under_every_policy(app: types.SimpleNamespace) -> None:
    policy = TypePolicy()
    assert policy.resolve("app_models:Unused") is None
    serializable(app.Unused)
    assert TypePolicy().resolve("app_models:Unused") is app.Unused


def test_exceptions_keep_their_type_only_where_safe(app: types.SimpleNamespace) -> None:
    policy = TypePolicy()
    codec = Codec(policy=policy)
    local = Codec()
    for exc, kept in ((ValueError("v"), True), (TimeoutError("t"), True),
                      (app.Refused("r"), False)):
        rebuilt = codec.unpackb(local.packb(exc))
        as_error = decode_error(encode_error(local, exc), policy)
        for value in (rebuilt, as_error):
            if kept:
                assert type(value) is type(exc)
            else:
                assert isinstance(value, RemoteGrainError)
                assert "Refused" in str(value) and "r" in str(value)
    policy.allow_module("app_models")
    assert type(decode_error(encode_error(local, app.Refused("r")), policy)) is app.Refused


def test_each_policy_has_its_own_cache(app: types.SimpleNamespace) -> None:
    local = TypePolicy.local()
    assert local.resolve("app_models:Unused") is app.Unused
    assert TypePolicy().resolve("app_models:Unused") is None


@pytest.mark.parametrize("name", [
    "os:system", "builtins:eval", "subprocess:Popen", "app_models", "app_models:",
    ":Line", "app_models:Line.__init__", "app_models:__class__", "nope.nope:Thing",
])
def test_hostile_names_resolve_to_nothing_usable(app: types.SimpleNamespace, name: str) -> None:
    policy = TypePolicy()
    policy.allow_grain_class(app.Shop, ["place"])
    resolved = policy.resolve(name)
    assert resolved is None or dataclasses.is_dataclass(resolved)
    codec = Codec(policy=policy)
    codec.unpackb(ext(EXT_DATACLASS, name, {}))  # a plain value, never a call
    codec.unpackb(ext(EXT_ENUM, name, 1))
    assert isinstance(codec.unpackb(ext(EXT_EXCEPTION, name, ["x"], "x")),
                      (RemoteGrainError, BaseException))
