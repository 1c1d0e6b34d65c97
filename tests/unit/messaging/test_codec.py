"""The msgpack codec: round trips of every supported type, errors, and call isolation."""

from __future__ import annotations

import dataclasses
import datetime as dt
import subprocess
import sys
import uuid
from decimal import Decimal
from enum import Enum, IntEnum, IntFlag, StrEnum
from typing import Any

import msgpack
import pytest

from orleanspy import Grain, SerializationError
from orleanspy.ids import GrainId
from orleanspy.messaging.codec import EXT_TUPLE, MAX_EXT_DEPTH, Codec
from orleanspy.messaging.types import TypePolicy


class Color(Enum):
    RED = "red"
    GREEN = "green"


class Level(IntEnum):
    LOW = 1
    HIGH = 2


class Mood(StrEnum):
    HAPPY = "happy"
    GRUMPY = "grumpy"


class LegacyMood(str, Enum):  # noqa: UP042 - the pre-3.11 spelling must work too
    CALM = "calm"
    ANGRY = "angry"


class Perm(IntFlag):
    READ = 1
    WRITE = 2


@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: int


@dataclasses.dataclass
class Shape:
    name: str
    origin: Point
    points: list[Point]
    tags: set[str]
    color: Color
    meta: dict[str, tuple[int, ...]]
    parent: Shape | None = None


@dataclasses.dataclass
class Derived:
    a: int
    b: int = dataclasses.field(init=False, default=0)

    def __post_init__(self) -> None:
        self.b = self.a * 10


def _derived_changed() -> Derived:
    d = Derived(1)
    d.b = 99  # a non-init field that differs from what __post_init__ computes
    return d


SHAPE = Shape(
    name="tri",
    origin=Point(0, 0),
    points=[Point(1, 2), Point(3, 4)],
    tags={"a", "b"},
    color=Color.GREEN,
    meta={"dims": (1, 2, 3), "empty": ()},
    parent=Shape("root", Point(9, 9), [], set(), Color.RED, {}),
)

VALUES: dict[str, Any] = {
    "dataclass-nested": SHAPE,
    "dataclass-frozen": Point(5, -6),
    "dataclass-init-false-field": _derived_changed(),
    "enum": Color.RED,
    "int-enum": Level.HIGH,
    "str-enum": Mood.GRUMPY,
    "str-mixin-enum": LegacyMood.ANGRY,
    "int-flag": Perm.READ | Perm.WRITE,
    "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "datetime-naive": dt.datetime(2024, 2, 29, 23, 59, 58, 123456),
    "datetime-utc": dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=dt.UTC),
    "datetime-offset": dt.datetime(
        2024, 6, 1, 12, 0, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))
    ),
    "date": dt.date(1999, 12, 31),
    "time": dt.time(13, 14, 15, 160000),
    "timedelta": dt.timedelta(days=-3, seconds=7, microseconds=11),
    "decimal": Decimal("12345.678900"),
    "decimal-negative-small": Decimal("-0.000001"),
    "bytes": b"\x00\x01\xfe\xff",
    "empty-bytes": b"",
    "tuple": (1, "a", None),
    "tuple-nested": ((1, (2, (3,))), ()),
    "tuples-in-list": [(1, 2), (3,), [(4, 5)]],
    "tuples-in-dict": {"a": (1, 2), "b": [(3, 4)], "c": {"d": (5,)}},
    "tuple-keys": {(1, "x"): "one", (2, (3, 4)): "two"},
    "set": {1, 2, 3},
    "set-of-tuples": {(1, 2), (3, 4)},
    "frozenset": frozenset({"x", "y"}),
    "empty-set": set(),
    "enum-keys": {Color.RED: 1, Level.LOW: 2},
    "mixed": [{"when": dt.date(2020, 1, 1), "ids": {uuid.UUID(int=7)}, "amount": Decimal("1.5")}],
    "scalars": [0, -1, 2**63 - 1, 1.5, True, None, "ünïcode"],
}


def typed(value: Any) -> str:
    """A text form that shows the type of every part (a tuple is not a list)."""
    name = type(value).__qualname__
    if isinstance(value, Enum):
        return f"{name}.{value.name}"
    if isinstance(value, (list, tuple)):
        return f"{name}[{', '.join(typed(v) for v in value)}]"
    if isinstance(value, (set, frozenset)):
        return f"{name}{{{', '.join(sorted(typed(v) for v in value))}}}"
    if isinstance(value, dict):
        items = sorted(f"{typed(k)}: {typed(v)}" for k, v in value.items())
        return f"{name}{{{', '.join(items)}}}"
    if dataclasses.is_dataclass(value):
        parts = (f"{f.name}={typed(getattr(value, f.name))}" for f in dataclasses.fields(value))
        return f"{name}({', '.join(parts)})"
    return f"{name}:{value!r}"


class Echo(Grain):
    def __init__(self) -> None:
        self.items: list[int] = [1, 2]

    async def echo(self, value: Any = None) -> tuple[Any, str]:
        return value, typed(value)

    async def echo_kw(self, *, value: Any) -> Any:
        return value

    async def mutate(self, data: dict[str, Any]) -> dict[str, Any]:
        data["added"] = True
        data["nested"]["inner"].append(99)
        return data

    async def mutate_kw(self, *, data: dict[str, Any]) -> None:
        data["added"] = True

    async def move(self, shape: Shape) -> Shape:
        shape.points.append(Point(7, 7))
        return shape

    async def get_items(self) -> list[int]:
        return self.items

    async def unserialisable_result(self) -> Any:
        return lambda: None

    async def call_back(self, other: Any) -> Any:
        return await other.echo("via reference")

    async def ping(self) -> str:
        self.silo.probe.record("ping")
        return "pong"


# -- the codec itself ---------------------------------------------------------------------
@pytest.mark.parametrize("value", list(VALUES.values()), ids=list(VALUES))
def test_codec_round_trips_value_with_types(value):
    codec = Codec()

    decoded = codec.unpackb(codec.packb(value))

    assert decoded == value
    assert typed(decoded) == typed(value)


def test_codec_round_trips_aware_datetime_offset():
    codec = Codec()
    value = VALUES["datetime-offset"]

    decoded = codec.unpackb(codec.packb(value))

    assert decoded.utcoffset() == dt.timedelta(hours=5, minutes=30)
    assert decoded.replace(tzinfo=None) == value.replace(tzinfo=None)


def test_codec_round_trips_naive_datetime_stays_naive():
    codec = Codec()

    decoded = codec.unpackb(codec.packb(VALUES["datetime-naive"]))

    assert decoded.tzinfo is None


def test_codec_round_trips_grain_id():
    codec = Codec()
    gid = GrainId("Echo", ("tenant", 7))

    decoded = codec.unpackb(codec.packb(gid))

    assert decoded == gid
    assert type(decoded.key) is tuple


@pytest.mark.parametrize(
    ("value", "type_name"),
    [
        (lambda: 1, r"builtins\.function"),
        (object(), r"builtins\.object"),
        ({1: print}, r"builtins\.builtin_function_or_method"),
    ],
    ids=["lambda", "object", "nested-builtin-function"],
)
def test_codec_refuses_unserialisable_value_naming_its_type(value, type_name):
    with pytest.raises(SerializationError, match=type_name) as info:
        Codec().packb(value)

    assert isinstance(info.value, TypeError)


def test_codec_still_works_after_refusing_a_value():
    codec = Codec()
    with pytest.raises(SerializationError):
        codec.packb([1, (2, lambda: 3)])

    assert codec.unpackb(codec.packb([1, (2, 3)])) == [1, (2, 3)]


def test_codec_a_dataclass_that_does_not_resolve_arrives_as_the_dict_of_its_fields():
    @dataclasses.dataclass
    class Local:
        x: int

    codec = Codec()
    assert codec.unpackb(codec.packb(Local(1))) == {"x": 1}


# -- values through grain calls -----------------------------------------------------------
async def test_codec_values_round_trip_through_in_process_call(make_silo):
    silo = await make_silo(Echo)
    ref = silo.get_grain(Echo, 1)

    for name, value in VALUES.items():
        result, seen_by_grain = await ref.echo(value)
        assert seen_by_grain == typed(value), name
        assert result == value, name
        assert typed(result) == typed(value), name


async def test_codec_values_round_trip_through_client(make_cluster):
    cluster = await make_cluster(Echo)
    ref = cluster.client.get_grain(Echo, 1)

    for name, value in VALUES.items():
        result, seen_by_grain = await ref.echo(value)
        assert seen_by_grain == typed(value), name
        assert result == value, name
        assert typed(result) == typed(value), name


async def test_codec_keyword_arguments_round_trip(make_silo, make_cluster):
    silo = await make_silo(Echo)
    cluster = await make_cluster(Echo)

    for ref in (silo.get_grain(Echo, 1), cluster.client.get_grain(Echo, 1)):
        assert await ref.echo_kw(value=SHAPE) == SHAPE


async def test_codec_grain_reference_argument_is_callable(make_silo, make_cluster):
    silo = await make_silo(Echo)
    cluster = await make_cluster(Echo)

    assert await silo.get_grain(Echo, 1).call_back(silo.get_grain(Echo, 2)) == (
        "via reference", "str:'via reference'",
    )
    client = cluster.client
    assert await client.get_grain(Echo, 1).call_back(client.get_grain(Echo, 2)) == (
        "via reference", "str:'via reference'",
    )


@pytest.fixture
def unserialisable(request, tmp_path):
    """(value, pattern naming its type): a lambda or an open file."""
    if request.param == "lambda":
        yield (lambda: 1), r"builtins\.function"
        return
    with open(tmp_path / "f.txt", "w") as handle:
        yield handle, r"_io\.TextIOWrapper"


@pytest.mark.parametrize("unserialisable", ["lambda", "open-file"], indirect=True)
async def test_codec_unserialisable_argument_fails_at_in_process_call_site(
    make_silo, unserialisable
):
    silo = await make_silo(Echo)
    ref = silo.get_grain(Echo, 1)
    value, type_name = unserialisable

    with pytest.raises(SerializationError, match=type_name):
        await ref.echo(value)
    with pytest.raises(SerializationError, match=type_name):
        await ref.echo_kw(value=[value])

    assert silo.catalog.get(ref.grain_id) is None  # the grain was never reached
    assert await ref.ping() == "pong"


@pytest.mark.parametrize("unserialisable", ["lambda", "open-file"], indirect=True)
async def test_codec_unserialisable_argument_fails_at_client_call_site(
    make_cluster, unserialisable
):
    cluster = await make_cluster(Echo)
    ref = cluster.client.get_grain(Echo, 1)
    value, type_name = unserialisable

    with pytest.raises(SerializationError, match=type_name):
        await ref.echo(value)
    with pytest.raises(SerializationError, match=type_name):
        await ref.echo_kw(value={"nested": (value,)})

    assert cluster.silo.catalog.get(ref.grain_id) is None  # nothing reached the silo
    assert await ref.ping() == "pong"  # the connection still works


async def test_codec_unserialisable_result_raises_serialization_error(make_silo, make_cluster):
    silo = await make_silo(Echo)
    cluster = await make_cluster(Echo)

    with pytest.raises(SerializationError, match=r"builtins\.function"):
        await silo.get_grain(Echo, 1).unserialisable_result()
    with pytest.raises(SerializationError, match=r"builtins\.function"):
        await cluster.client.get_grain(Echo, 1).unserialisable_result()


# -- isolation ------------------------------------------------------------------------------
async def test_codec_isolation_grain_mutating_dict_argument_leaves_caller_dict(make_silo):
    silo = await make_silo(Echo)
    data = {"nested": {"inner": [1]}, "t": (1, 2)}

    returned = await silo.get_grain(Echo, 1).mutate(data)

    assert data == {"nested": {"inner": [1]}, "t": (1, 2)}
    assert returned == {"nested": {"inner": [1, 99]}, "t": (1, 2), "added": True}
    assert returned is not data


async def test_codec_isolation_grain_mutating_keyword_argument_leaves_caller_dict(make_silo):
    silo = await make_silo(Echo)
    data: dict[str, Any] = {"x": 1}

    await silo.get_grain(Echo, 1).mutate_kw(data=data)

    assert data == {"x": 1}


async def test_codec_isolation_grain_mutating_dataclass_argument_leaves_caller_object(
    make_silo,
):
    silo = await make_silo(Echo)
    shape = Shape("s", Point(0, 0), [Point(1, 1)], set(), Color.RED, {})

    moved = await silo.get_grain(Echo, 1).move(shape)

    assert shape.points == [Point(1, 1)]
    assert moved.points == [Point(1, 1), Point(7, 7)]


async def test_codec_isolation_caller_mutating_result_leaves_grain_state(make_silo):
    silo = await make_silo(Echo)
    ref = silo.get_grain(Echo, 1)

    items = await ref.get_items()
    items.append(3)

    assert await ref.get_items() == [1, 2]


def _nested_tuples(levels: int) -> bytes:
    data = msgpack.packb([1])
    for _ in range(levels):
        data = msgpack.packb(msgpack.ExtType(EXT_TUPLE, data))
    return data


def test_codec_refuses_ext_values_nested_past_the_limit_and_stays_usable():
    codec = Codec(None, policy=TypePolicy())
    assert codec.unpackb(_nested_tuples(MAX_EXT_DEPTH)) is not None
    with pytest.raises(SerializationError, match="nested more than"):
        codec.unpackb(_nested_tuples(MAX_EXT_DEPTH + 1))
    assert codec.unpackb(codec.packb((1, (2, 3)))) == (1, (2, 3))


def test_codec_a_small_frame_of_deeply_nested_ext_values_does_not_crash_the_process():
    """200 nested tuples fit in under 1 KiB; decoded without a depth bound they overflow the C
    stack (SIGSEGV). The check runs in a child process so that a crash fails this test only."""
    frame = _nested_tuples(200)
    assert len(frame) < 1024
    script = (
        "import sys\n"
        "from orleanspy.errors import SerializationError\n"
        "from orleanspy.messaging.codec import Codec\n"
        "from orleanspy.messaging.types import TypePolicy\n"
        "try:\n"
        "    Codec(None, policy=TypePolicy()).unpackb(sys.stdin.buffer.read())\n"
        "except SerializationError:\n"
        "    sys.exit(3)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], input=frame, timeout=60, check=False)
    assert done.returncode == 3
