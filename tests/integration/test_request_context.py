"""Request context and call filters across real silo processes: two silos in a cluster
(SQLite membership in tmp_path), grains placed by hash, the client on the first silo's
gateway. One cluster serves both checks to keep the suite fast."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orleanspy import ClusterClient, MessageRejectedError, RemoteGrainError, RequestContext
from orleanspy.grains.request_context import request_context

from .silo_process import SiloLauncher, poll_until
from .test_cluster import CLUSTER, start_cluster

pytestmark = pytest.mark.integration

APP = "tests.integration.context_app"


async def _key_on(client: ClusterClient, type_name: str, silo: str, other: bool,
                  prefix: str) -> str:
    """A key whose activation runs on ``silo`` (or, ``other``, on another one)."""
    for i in range(64):
        key = f"{prefix}-{i}"
        where = await client.get_grain(type_name, key).where()
        if (where != silo) == other:
            return key
    raise AssertionError(f"no {type_name} key placed {'off' if other else 'on'} {silo}")


async def test_context_travels_three_hops_and_a_filter_rejects_by_it(
        silo_launcher: SiloLauncher):
    silo_launcher.data_dir.mkdir(parents=True, exist_ok=True)
    config = silo_launcher.data_dir / "streams.toml"
    config.write_text('[streams.s]\nadapter = "sqlite:streams.db"\npull_period = 0.02\n',
                      encoding="utf-8")
    first, _second = await start_cluster(silo_launcher, n=2, app=APP,
                                         extra=("--config", str(config)))
    client = first.client(cluster_id=CLUSTER)
    await client.connect()
    try:
        gateway_silo = first.silo_address.partition("@")[0]  # host:port, as silo.name
        # client -> A (gateway silo) -> B (another silo) -> C (back on the gateway silo)
        a = await _key_on(client, "Hopper", gateway_silo, False, "a")
        b = await _key_on(client, "Hopper", gateway_silo, True, "b")
        c = await _key_on(client, "Hopper", gateway_silo, False, "c")
        with RequestContext.set(tenant="acme"):
            hops: list[list[Any]] = await client.get_grain("Hopper", a).relay([b, c])
        assert [tenant for _, tenant in hops] == ["acme", "acme", "acme"]
        assert hops[0][0] == hops[2][0] == gateway_silo != hops[1][0]
        assert (await client.get_grain("Hopper", a).relay([b, c]))[2][1] is None

        # client -> gateway silo -> Guarded on the other silo, rejected by its filter
        g = await _key_on(client, "Guarded", gateway_silo, True, "g")
        guarded = client.get_grain("Guarded", g)
        with RequestContext.set(tenant="allowed"):
            assert (await guarded.secret()).startswith(f"secret of {g} on ")
        with RequestContext.set(tenant="mallory"), pytest.raises(
                (PermissionError, RemoteGrainError), match="'mallory' may not call secret"):
            await guarded.secret()
        with pytest.raises((PermissionError, RemoteGrainError), match="None may not"):
            await guarded.secret()

        # client -> gateway silo -> a publisher on the other silo -> stream -> a consumer:
        # each event is handled under the context of the call that published it
        p = await _key_on(client, "ContextPublisher", gateway_silo, True, "p")
        with RequestContext.set(tenant="acme"):
            await client.get_grain("ContextPublisher", p).publish("k", [1, 2])
        await client.get_grain("ContextPublisher", p).publish("k", [3])
        sink = client.get_grain("ContextSink", "k")
        seen = await poll_until(sink.seen, lambda s: len(s) >= 3, timeout=15)
        assert [[item, tenant] for item, tenant, _ in seen] == [
            [1, "acme"], [2, "acme"], [3, None]]

        # the gateway holds a client's context to the rules RequestContext.set checks
        token = request_context.set({"tenant": "allowed", "blob": "x" * 5000})
        try:
            with pytest.raises(MessageRejectedError, match="4096-byte limit"):
                await guarded.secret()
        finally:
            request_context.reset(token)
    finally:
        await client.close()


async def test_a_silo_filter_from_the_config_file_rejects_by_context(
        silo_launcher: SiloLauncher, tmp_path: Path):
    """``[filters] incoming = ["module:function"]`` in the silo's config file: the silo
    process imports the filter and runs it around every call it serves."""
    config = tmp_path / "filters.toml"
    config.write_text('[filters]\nincoming = ["tests.integration.context_app:'
                      'tenant_required"]\n', encoding="utf-8")
    silo = await silo_launcher.start("--config", str(config), app=APP)
    client = silo.client()
    await client.connect()
    try:
        hopper = client.get_grain("Hopper", "h")
        with RequestContext.set(tenant="acme"):
            assert (await hopper.relay([]))[0][1] == "acme"
        with RequestContext.set(tenant="blocked"), pytest.raises(
                (PermissionError, RemoteGrainError), match="'blocked' is refused by the silo"):
            await hopper.relay([])
        with pytest.raises((PermissionError, RemoteGrainError), match="None is refused"):
            await hopper.where()
        assert (await client.get_grain("Guarded", "g").where())  # other classes pass
    finally:
        await client.close()
