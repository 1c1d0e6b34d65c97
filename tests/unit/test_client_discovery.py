"""GatewayDiscovery: the client reads gateways of active silos from the membership table."""

from __future__ import annotations

from pathlib import Path

import pytest
from structlog.testing import capture_logs

from orleanspy.client.discovery import GatewayDiscovery
from orleanspy.client.options import ClientOptions
from orleanspy.cluster.membership import SiloStatus, SqliteMembershipTable
from orleanspy.errors import ConfigurationError
from orleanspy.ids import SiloAddress
from orleanspy.logging import get_logger
from orleanspy.testing.membership_conformance import sample_entry


async def write_table(path: Path) -> None:
    table = SqliteMembershipTable(str(path), cluster_id="disc")
    try:
        await table.open()
        rows = [
            sample_entry(SiloAddress("10.0.0.1", 11111, 1), gateway_port=30000),
            sample_entry(SiloAddress("10.0.0.2", 11111, 1), gateway_port=30001),
            sample_entry(SiloAddress("10.0.0.3", 11111, 1), SiloStatus.DEAD, gateway_port=30002),
            sample_entry(SiloAddress("10.0.0.4", 11111, 1), gateway_port=None),
        ]
        for entry in rows:
            assert await table.insert_row(entry, (await table.read_all()).version)
    finally:
        await table.close()


@pytest.mark.parametrize("form", ["sqlite:{}", "sqlite://{}"])
async def test_discovery_reads_gateways_of_active_silos_in_either_url_form(
    tmp_path: Path, form: str
) -> None:
    path = tmp_path / "membership.db"
    await write_table(path)
    discovery = GatewayDiscovery(form.format(path), "disc", get_logger("test"))

    assert sorted(await discovery.gateways() or []) == ["10.0.0.1:30000", "10.0.0.2:30001"]


async def test_discovery_resolves_a_relative_path_against_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await write_table(tmp_path / "membership.db")
    monkeypatch.chdir(tmp_path)
    discovery = GatewayDiscovery("sqlite://membership.db", "disc", get_logger("test"))

    assert len(await discovery.gateways() or []) == 2


async def test_discovery_of_a_missing_file_warns_and_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "none.db"
    discovery = GatewayDiscovery(f"sqlite:{path}", "disc", get_logger("test"))
    with capture_logs() as logs:
        assert await discovery.gateways() is None
    assert [e["event"] for e in logs] == ["client_membership_unreadable"]
    assert not path.exists()


def test_client_options_parse_membership_like_a_silo() -> None:
    assert ClientOptions(membership="sqlite://m.db").membership == "sqlite://m.db"
    with pytest.raises(ConfigurationError, match=r"ClientOptions\.membership"):
        ClientOptions(membership="sqlite:")
    with pytest.raises(ConfigurationError, match=r"ClientOptions\.membership"):
        ClientOptions(membership="memory")
