"""``advertise`` is the address a silo gives the others; listening beyond loopback needs
the cluster's credentials."""

from __future__ import annotations

import pytest

from orleanspy import ClusterClient, ConfigurationError, Grain, Silo, SiloOptions

KEY = "k" * 32


class Echo(Grain):
    async def echo(self, value: str) -> str:
        return value


def test_listening_on_every_interface_needs_advertise() -> None:
    with pytest.raises(ConfigurationError, match="advertise"):
        Silo(SiloOptions(host="0.0.0.0", gateway_port=None))
    options = SiloOptions(host="0.0.0.0", advertise="10.0.0.11", gateway_port=None)
    options.check_listening()
    assert options.advertised_host == "10.0.0.11"


def test_beyond_loopback_the_credentials_are_required() -> None:
    with pytest.raises(ConfigurationError, match="cluster_key"):
        Silo(SiloOptions(host="0.0.0.0", advertise="10.0.0.11", membership="memory",
                         gateway_port=None))
    with pytest.raises(ConfigurationError, match="secret"):
        Silo(SiloOptions(host="0.0.0.0", advertise="10.0.0.11", gateway_port=30000))
    SiloOptions(host="0.0.0.0", advertise="10.0.0.11", membership="memory", cluster_key=KEY,
                secret="s3cret").check_listening()
    SiloOptions(host="127.0.0.1", membership="memory").check_listening()  # as before


async def test_a_silo_listens_on_host_and_names_itself_by_advertise() -> None:
    silo = Silo(SiloOptions(host="0.0.0.0", advertise="127.0.0.1", port=0, gateway_port=0,
                            membership="memory", cluster_key=KEY, secret="s3cret"),
                grains=[Echo])
    await silo.start()
    try:
        assert silo.address.host == "127.0.0.1"
        assert silo.gateway is not None and silo.gateway.address.startswith("127.0.0.1:")
        assert silo.cluster is not None and silo.cluster.me.host == "127.0.0.1"
        async with ClusterClient(gateways=[silo.gateway.address], secret="s3cret") as client:
            assert await client.get_grain(Echo, "e").echo("hi") == "hi"
    finally:
        await silo.stop()
