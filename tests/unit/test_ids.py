"""ids.py: grain ids shared per plain key, silo addresses interned."""

from __future__ import annotations

import copy
import gc
import threading
import uuid

import pytest

import orleanspy.ids as ids
from orleanspy.ids import GrainId, SiloAddress, grain_id


def test_grain_id_is_one_object_per_plain_key_and_the_table_stays_bounded() -> None:
    assert grain_id("T", "a") is grain_id("T", "a")
    key = uuid.uuid4()
    assert grain_id("T", key) is grain_id("T", uuid.UUID(str(key)))
    assert grain_id("T", 1) is not grain_id("T", "1")
    assert grain_id("T", 1) != grain_id("T", "1")
    assert grain_id("T", ("a", 1)) == GrainId("T", ("a", 1))  # tuple keys: built each time
    with pytest.raises(TypeError, match="bool"):
        grain_id("T", False)
    for i in range(ids._GRAIN_ID_CACHE_MAX + 10):
        grain_id("Flood", i)
    assert len(ids._grain_id_cache) <= ids._GRAIN_ID_CACHE_MAX
    assert grain_id("T", "a") == GrainId("T", "a")  # equal to one built apart


def test_silo_address_equal_values_are_one_object() -> None:
    a = SiloAddress("10.0.0.1", 11111, 7)
    assert SiloAddress("10.0.0.1", 11111, 7) is a
    assert copy.copy(a) is a and copy.deepcopy(a) is a
    assert SiloAddress("10.0.0.1", 11111, 8) != a
    assert SiloAddress("10.0.0.1", 11112, 7) != a
    assert {a: 1}[SiloAddress("10.0.0.1", 11111, 7)] == 1
    assert str(a) == "10.0.0.1:11111@7"
    with pytest.raises(AttributeError, match="immutable"):
        a.port = 1  # type: ignore[misc]


def test_silo_address_table_forgets_an_address_no_one_holds() -> None:
    SiloAddress("10.9.9.9", 1, 1)
    gc.collect()
    assert ("10.9.9.9", 1, 1) not in ids._silo_address_cache
    again = SiloAddress("10.9.9.9", 1, 1)
    assert again == SiloAddress("10.9.9.9", 1, 1)


def test_silo_address_built_in_many_threads_at_once_is_still_one_object() -> None:
    barrier = threading.Barrier(8)
    made: list[SiloAddress] = []

    def build() -> None:
        barrier.wait(timeout=10)
        made.extend(SiloAddress("10.1.2.3", 4242, 99) for _ in range(2000))

    threads = [threading.Thread(target=build) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(made) == 16_000
    assert len({id(s) for s in made}) == 1
