"""References handed out by a runtime: one per (grain class, plain key), immutable values."""

from __future__ import annotations

import asyncio
import uuid

import pytest

import orleanspy.grains.proxy as proxy
from orleanspy.grains.proxy import References
from tests.unit.runtime.echo_grain import Echo

WAIT = 5.0


async def test_get_grain_hands_out_one_reference_per_plain_key(make_silo):
    silo = await make_silo(Echo)
    first = silo.get_grain(Echo, "k")
    assert silo.get_grain(Echo, "k") is first
    key = uuid.uuid4()
    assert silo.get_grain(Echo, key) is silo.get_grain(Echo, uuid.UUID(str(key)))
    assert silo.get_grain(Echo, 1) is not silo.get_grain(Echo, "1")
    assert silo.get_grain(Echo, 1) != silo.get_grain(Echo, "1")
    assert silo.get_grain("Echo", "k") is silo.get_grain("Echo", "k")  # by type name too
    tuple_ref = silo.get_grain(Echo, ("a", 1))
    assert silo.get_grain(Echo, ("a", 1)) == tuple_ref  # built each time, equal
    async with asyncio.timeout(WAIT):
        assert await first.echo(3) == 3
        assert await silo.get_grain(Echo, "k").echo(4) == 4
        slow = first.with_timeout(2.0)  # a copy: the shared reference keeps its timeout
        assert slow is not first and await slow.ping() == "pong"
    assert first._timeout is None


async def test_get_grain_refuses_what_is_no_grain_and_caches_nothing_for_it(make_silo):
    silo = await make_silo(Echo)
    with pytest.raises(TypeError, match="grain class or type name"):
        silo.get_grain(3.5, "k")  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="bool"):
        silo.get_grain(Echo, True)
    assert silo.get_grain(Echo, "k").key == "k"


def test_references_table_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proxy, "_REFERENCES_MAX", 8)
    made: list[type] = []
    refs = References(runtime=None, on_new=made.append)  # type: ignore[arg-type]
    for i in range(20):
        refs.get(Echo, i)
    assert len(refs._made) <= 8
    assert refs.get(Echo, 19) is refs.get(Echo, 19)
    assert made and set(made) == {Echo}  # told of each class it made a reference for
