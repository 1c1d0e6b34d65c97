"""Calls through TestCluster.client: a real socket, the wire format and error mapping."""

from __future__ import annotations

import asyncio
import time

import pytest

from orleanspy import (
    ClusterClient,
    Grain,
    GrainCallTimeoutError,
    MessageRejectedError,
    RemoteGrainError,
    one_way,
)

WAIT = 5.0


class InsufficientFunds(Exception):
    """A custom exception type the client can import."""


class CodedError(Exception):
    def __init__(self, code: int, detail: str) -> None:
        super().__init__(code, detail)
        self.code = code
        self.detail = detail


class Calc(Grain):
    def __init__(self) -> None:
        self.total = 0

    async def on_activate(self) -> None:
        self.silo.probe.record(("activate", self.key))

    async def add(self, n: int, *, times: int = 1) -> int:
        self.total += n * times
        return self.total

    async def nothing(self) -> None:
        return None

    async def describe(self, value: object) -> dict[str, object]:
        return {"type": type(value).__name__, "value": value}

    async def fail_builtin(self) -> None:
        raise ValueError("negative amount: -5")

    async def fail_custom(self) -> None:
        raise InsufficientFunds("balance 3 < 10")

    async def fail_coded(self) -> None:
        raise CodedError(404, "no such account")

    async def fail_local_type(self) -> None:
        class HiddenError(Exception):
            pass

        raise HiddenError("cannot import me")

    async def fail_after_suspension(self) -> None:
        await asyncio.sleep(0)
        raise KeyError("late")

    async def slow(self) -> str:
        await self.silo.probe.gate("slow").wait()
        return "slow done"

    @one_way
    async def note(self, text: str) -> None:
        self.silo.probe.record(("note", self.key, text))

    async def timed_wait(self) -> str:
        try:
            async with asyncio.timeout(0.05):
                await self.silo.probe.gate("never-before-teardown").wait()
        except TimeoutError:
            return "inner timeout"
        return "gate opened"


# -- results ------------------------------------------------------------------------------
async def test_client_returns_results(make_cluster):
    cluster = await make_cluster(Calc)
    ref = cluster.client.get_grain(Calc, "a")

    async with asyncio.timeout(WAIT):
        assert await ref.add(2) == 2
        assert await ref.add(3, times=2) == 8
        assert await ref.nothing() is None
        assert await ref.describe((1, [2])) == {"type": "tuple", "value": (1, [2])}


async def test_client_and_in_process_references_reach_the_same_activation(make_cluster):
    cluster = await make_cluster(Calc)

    await cluster.client.get_grain(Calc, "a").add(5)

    assert await cluster.get_grain(Calc, "a").add(1) == 6
    assert len(cluster.silo.catalog) == 1


async def test_client_calls_by_type_name_and_invoke(make_cluster):
    cluster = await make_cluster(Calc)

    async with asyncio.timeout(WAIT):
        assert await cluster.client.get_grain("Calc", 7).add(1) == 1
        assert await cluster.client.get_grain(Calc, 7).invoke("add", 2, times=3) == 7


async def test_client_concurrent_first_calls_create_one_activation(make_cluster, probe):
    cluster = await make_cluster(Calc)
    ref = cluster.client.get_grain(Calc, "hot")

    async with asyncio.timeout(WAIT):
        results = await asyncio.gather(*(ref.add(1) for _ in range(300)))

    assert sorted(results) == list(range(1, 301))
    assert probe.log.count(("activate", "hot")) == 1
    assert len(cluster.silo.catalog) == 1


async def test_client_one_way_call_is_delivered(make_cluster, probe):
    cluster = await make_cluster(Calc)

    async with asyncio.timeout(WAIT):
        assert await cluster.client.get_grain(Calc, "a").note("hello") is None
        await cluster.client.get_grain(Calc, "a").invoke_one_way("note", "again")

    await probe.wait_for(lambda log: [e for e in log if e[0] == "note"] == [
        ("note", "a", "hello"), ("note", "a", "again")
    ])


async def test_client_via_plugin_fixture(orleanspy_cluster, probe):
    cluster = await orleanspy_cluster(grains=[Calc])
    cluster.silo.probe = probe

    async with asyncio.timeout(WAIT):
        assert await cluster.client.get_grain(Calc, 1).add(4) == 4
    assert probe.log == [("activate", 1)]


# -- exceptions ---------------------------------------------------------------------------
async def test_client_raises_builtin_exception_with_message(make_cluster):
    cluster = await make_cluster(Calc)

    with pytest.raises(ValueError) as info:
        async with asyncio.timeout(WAIT):
            await cluster.client.get_grain(Calc, "a").fail_builtin()

    assert type(info.value) is ValueError
    assert str(info.value) == "negative amount: -5"


async def test_client_raises_custom_exception_type_with_message(make_cluster):
    cluster = await make_cluster(Calc)

    with pytest.raises(InsufficientFunds) as info:
        async with asyncio.timeout(WAIT):
            await cluster.client.get_grain(Calc, "a").fail_custom()

    assert str(info.value) == "balance 3 < 10"

    assert "fail_custom" in info.value.remote_traceback


async def test_client_raises_custom_exception_with_its_arguments(make_cluster):
    cluster = await make_cluster(Calc)

    with pytest.raises(CodedError) as info:
        async with asyncio.timeout(WAIT):
            await cluster.client.get_grain(Calc, "a").fail_coded()

    assert (info.value.code, info.value.detail) == (404, "no such account")


async def test_client_raises_exception_thrown_after_suspension(make_cluster):
    cluster = await make_cluster(Calc)

    with pytest.raises(KeyError, match="late"):
        async with asyncio.timeout(WAIT):
            await cluster.client.get_grain(Calc, "a").fail_after_suspension()


async def test_client_raises_remote_grain_error_for_type_it_cannot_import(make_cluster):
    cluster = await make_cluster(Calc)

    with pytest.raises(RemoteGrainError) as info:
        async with asyncio.timeout(WAIT):
            await cluster.client.get_grain(Calc, "a").fail_local_type()

    err = info.value
    assert err.type_name.endswith("Calc.fail_local_type.<locals>.HiddenError")
    assert err.message == "cannot import me"
    assert "cannot import me" in str(err)
    assert 'raise HiddenError("cannot import me")' in err.remote_traceback


async def test_client_connection_survives_grain_errors(make_cluster):
    cluster = await make_cluster(Calc)
    ref = cluster.client.get_grain(Calc, "a")
    for _ in range(3):
        with pytest.raises(ValueError):
            await ref.fail_builtin()

    assert await ref.add(1) == 1


async def test_client_unknown_method_raises_message_rejected(make_cluster):
    cluster = await make_cluster(Calc)

    with pytest.raises(MessageRejectedError, match="no method 'nope'") as info:
        async with asyncio.timeout(WAIT):
            await cluster.client.get_grain(Calc, "a").invoke("nope", 1)

    assert info.value.kind == "unknown_method"


async def test_client_unknown_grain_type_raises_message_rejected(make_cluster):
    cluster = await make_cluster(Calc)

    with pytest.raises(MessageRejectedError, match="unknown grain type 'Missing'") as info:
        async with asyncio.timeout(WAIT):
            await cluster.client.get_grain("Missing", 1).anything()

    assert info.value.kind == "unknown_grain_type"


# -- timeouts -----------------------------------------------------------------------------
async def test_client_call_times_out_after_with_timeout(make_cluster, probe):
    cluster = await make_cluster(Calc)
    ref = cluster.client.get_grain(Calc, "a")

    start = time.monotonic()
    with pytest.raises(GrainCallTimeoutError, match=r"timed out after 0\.1 s") as info:
        async with asyncio.timeout(WAIT):
            await ref.with_timeout(0.1).slow()

    assert isinstance(info.value, TimeoutError)
    assert time.monotonic() - start < 2.0
    probe.open("slow")
    async with asyncio.timeout(WAIT):
        assert await ref.slow() == "slow done"  # the client is still usable


async def test_client_call_times_out_after_client_response_timeout(make_cluster):
    cluster = await make_cluster(Calc)
    gateway = f"{cluster.silo.options.host}:{cluster.silo.gateway.port}"

    async with ClusterClient(
        gateways=[gateway], cluster_id=cluster.silo.options.cluster_id, response_timeout=0.1
    ) as client:
        with pytest.raises(GrainCallTimeoutError) as info:
            async with asyncio.timeout(WAIT):
                await client.get_grain(Calc, "a").slow()

    assert isinstance(info.value, TimeoutError)


async def test_client_grain_may_use_asyncio_timeout(make_cluster):
    cluster = await make_cluster(Calc)

    async with asyncio.timeout(WAIT):
        assert await cluster.client.get_grain(Calc, "a").timed_wait() == "inner timeout"
