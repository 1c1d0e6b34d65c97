"""Persistent grain state: read before on_activate, write, etag conflicts, write on deactivate."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from orleanspy import (
    ActivationFailedError,
    ConfigurationError,
    DeactivationReason,
    Grain,
    InconsistentStateError,
    persistent_state,
)
from orleanspy.ids import GrainId
from orleanspy.messaging.codec import Codec
from orleanspy.storage.memory import MemoryGrainStorage

WAIT = 5.0
CODEC = Codec()


@dataclass
class AccountState:
    balance: int = 0
    history: list[int] = field(default_factory=list)


@dataclass
class Settings:
    label: str = "none"


class CountingStorage(MemoryGrainStorage):
    """A memory storage that counts writes."""

    __slots__ = ("writes",)

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    async def write(self, grain_id, state_name, data, etag):
        etag = await super().write(grain_id, state_name, data, etag)
        self.writes += 1
        return etag


class Account(Grain):
    state = persistent_state(AccountState)

    async def on_activate(self) -> None:
        self.silo.probe.record(("activated-with", self.key, self.state.value.balance))

    async def on_deactivate(self, reason: DeactivationReason) -> None:
        self.silo.probe.record(("deactivate", self.key, reason))

    async def deposit(self, amount: int) -> int:
        self.state.value.balance += amount
        self.state.value.history.append(amount)
        await self.state.write()
        return self.state.value.balance

    async def change_without_write(self, amount: int) -> None:
        self.state.value.balance += amount

    async def balance(self) -> int:
        return self.state.value.balance

    async def snapshot(self) -> tuple[AccountState, str | None, bool]:
        return self.state.value, self.state.etag, self.state.record_exists

    async def clear(self) -> None:
        await self.state.clear()

    async def reread(self) -> int:
        await self.state.read()
        return self.state.value.balance

    async def leave(self) -> None:
        self.deactivate_on_idle()


class Scratch(Grain):
    scratch = persistent_state(AccountState, name="scratch", write_on_deactivate=False)

    async def change_without_write(self, amount: int) -> None:
        self.scratch.value.balance += amount

    async def leave(self) -> None:
        self.deactivate_on_idle()


class Configured(Grain):
    settings = persistent_state(Settings, name="settings", storage="other")

    async def set_label(self, label: str) -> None:
        self.settings.value.label = label
        await self.settings.write()


GRAINS = (Account, Scratch, Configured)


async def stored(storage, type_name: str, key, name: str):
    record = await storage.read(GrainId(type_name, key), name)
    return None if record is None else CODEC.unpackb(record.data)


async def deactivate(silo, ref) -> None:
    act = silo.catalog.get(ref.grain_id)
    await ref.leave()
    async with asyncio.timeout(WAIT):
        await act.wait_deactivated()


async def test_state_read_before_on_activate(make_silo, probe):
    storage = MemoryGrainStorage()
    await storage.write(GrainId("Account", "k"), "state", CODEC.packb(AccountState(5, [5])), None)
    silo = await make_silo(*GRAINS, storage={"default": storage})

    value, etag, exists = await silo.get_grain(Account, "k").snapshot()

    assert probe.log[0] == ("activated-with", "k", 5)
    assert value == AccountState(5, [5])
    assert exists is True
    assert etag == (await storage.read(GrainId("Account", "k"), "state")).etag


async def test_state_defaults_when_nothing_stored(make_silo, probe):
    silo = await make_silo(*GRAINS)

    value, etag, exists = await silo.get_grain(Account, "new").snapshot()

    assert (value, etag, exists) == (AccountState(), None, False)


async def test_state_write_stores_value_and_new_etag(make_silo):
    storage = CountingStorage()
    silo = await make_silo(*GRAINS, storage={"default": storage})
    ref = silo.get_grain(Account, "k")

    assert await ref.deposit(10) == 10
    _, etag1, _ = await ref.snapshot()
    assert await ref.deposit(5) == 15
    _, etag2, _ = await ref.snapshot()

    assert await stored(storage, "Account", "k", "state") == AccountState(15, [10, 5])
    assert storage.writes == 2
    assert etag1 is not None and etag2 is not None and etag1 != etag2


async def test_state_restored_after_deactivation_and_reactivation(make_silo, probe):
    silo = await make_silo(*GRAINS)
    ref = silo.get_grain(Account, "k")
    await ref.deposit(10)
    await ref.deposit(3)

    await deactivate(silo, ref)

    assert await ref.balance() == 13
    assert [e for e in probe.log if e[0] == "activated-with"] == [
        ("activated-with", "k", 0),
        ("activated-with", "k", 13),
    ]


async def test_state_written_on_deactivation_when_changed(make_silo):
    storage = CountingStorage()
    silo = await make_silo(*GRAINS, storage={"default": storage})
    ref = silo.get_grain(Account, "k")
    await ref.deposit(1)
    await ref.change_without_write(41)
    assert await stored(storage, "Account", "k", "state") == AccountState(1, [1])

    await deactivate(silo, ref)

    assert await stored(storage, "Account", "k", "state") == AccountState(42, [1])
    assert storage.writes == 2
    assert await ref.balance() == 42


async def test_state_not_written_on_deactivation_when_unchanged(make_silo):
    storage = CountingStorage()
    silo = await make_silo(*GRAINS, storage={"default": storage})
    ref = silo.get_grain(Account, "k")
    await ref.deposit(1)
    await ref.balance()

    await deactivate(silo, ref)

    assert storage.writes == 1


async def test_state_untouched_default_not_written_on_deactivation(make_silo):
    storage = CountingStorage()
    silo = await make_silo(*GRAINS, storage={"default": storage})
    ref = silo.get_grain(Account, "k")
    await ref.balance()

    await deactivate(silo, ref)

    assert storage.writes == 0
    assert await storage.read(GrainId("Account", "k"), "state") is None


async def test_state_write_on_deactivate_false_skips_flush(make_silo):
    storage = CountingStorage()
    silo = await make_silo(*GRAINS, storage={"default": storage})
    ref = silo.get_grain(Scratch, "k")
    await ref.change_without_write(5)

    await deactivate(silo, ref)

    assert storage.writes == 0


async def test_state_written_on_silo_shutdown_when_changed(make_silo):
    storage = MemoryGrainStorage()
    silo = await make_silo(*GRAINS, storage={"default": storage})
    ref = silo.get_grain(Account, "k")
    await ref.change_without_write(9)

    async with asyncio.timeout(WAIT):
        await silo.stop()

    assert await stored(storage, "Account", "k", "state") == AccountState(9, [])


async def test_state_clear_deletes_record_and_resets_value(make_silo):
    storage = MemoryGrainStorage()
    silo = await make_silo(*GRAINS, storage={"default": storage})
    ref = silo.get_grain(Account, "k")
    await ref.deposit(7)

    await ref.clear()

    assert await ref.snapshot() == (AccountState(), None, False)
    assert await storage.read(GrainId("Account", "k"), "state") is None
    assert await ref.deposit(1) == 1  # a fresh record can be created again


async def test_state_named_storage_provider_is_used(make_silo):
    default, other = MemoryGrainStorage(), MemoryGrainStorage()
    silo = await make_silo(*GRAINS, storage={"default": default, "other": other})

    await silo.get_grain(Configured, "k").set_label("blue")

    assert await stored(other, "Configured", "k", "settings") == Settings("blue")
    assert await default.read(GrainId("Configured", "k"), "settings") is None


async def test_state_missing_storage_provider_fails_activation(make_silo):
    silo = await make_silo(*GRAINS)

    with pytest.raises(ActivationFailedError, match="'other'") as info:
        await silo.get_grain(Configured, "k").set_label("blue")

    assert isinstance(info.value.__cause__, ConfigurationError)


async def test_state_etag_conflict_raises_inconsistent_state_and_deactivates(make_silo, probe):
    shared = MemoryGrainStorage()
    silo1 = await make_silo(*GRAINS, storage={"default": shared})
    silo2 = await make_silo(*GRAINS, storage={"default": shared})
    on1 = silo1.get_grain(Account, "k")
    on2 = silo2.get_grain(Account, "k")
    assert await on1.deposit(1) == 1
    assert await on2.balance() == 1  # silo2's activation now holds the first etag
    assert await on1.deposit(1) == 2  # silo1 moves the record on
    stale = silo2.catalog.get(on2.grain_id)

    with pytest.raises(InconsistentStateError, match="etag"):
        await on2.deposit(100)

    async with asyncio.timeout(WAIT):
        await stale.wait_deactivated()
    assert ("deactivate", "k", DeactivationReason.INCONSISTENT_STATE) in probe.log
    # the rejected value was not flushed on deactivation; the next call reads the record
    assert await stored(shared, "Account", "k", "state") == AccountState(2, [1, 1])
    assert await on2.balance() == 2
    assert silo2.catalog.get(on2.grain_id) is not stale
    assert await on2.deposit(3) == 5


async def test_state_read_refreshes_value_from_storage(make_silo):
    shared = MemoryGrainStorage()
    silo1 = await make_silo(*GRAINS, storage={"default": shared})
    silo2 = await make_silo(*GRAINS, storage={"default": shared})
    await silo1.get_grain(Account, "k").deposit(1)
    on2 = silo2.get_grain(Account, "k")
    assert await on2.balance() == 1
    await silo1.get_grain(Account, "k").deposit(4)

    assert await on2.reread() == 5
    assert await on2.deposit(1) == 6  # the etag was refreshed as well
