"""``orleanspy cluster status`` with a membership table that is not the silos': a file that
does not exist is an error (and is not created), and a cluster id without rows names the
clusters the table holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from orleanspy.cluster.membership import SqliteMembershipTable
from orleanspy.ids import SiloAddress
from orleanspy.testing.membership_conformance import sample_entry

from .silo_process import run_cli_to_end

pytestmark = pytest.mark.integration


async def test_a_missing_membership_file_is_an_error_and_is_not_created(tmp_path: Path) -> None:
    code, _, err = await run_cli_to_end(
        "cluster", "status", "--membership", "sqlite:typo.db", "--data-dir", str(tmp_path))
    assert code == 2
    assert "no membership table at" in err and "typo.db" in err
    assert not (tmp_path / "typo.db").exists()


async def test_a_cluster_id_without_rows_names_the_clusters_the_table_holds(
    tmp_path: Path,
) -> None:
    table = SqliteMembershipTable(str(tmp_path / "cluster.db"), cluster_id="prod")
    try:
        version = (await table.read_all()).version
        assert await table.insert_row(sample_entry(SiloAddress("127.0.0.1", 1, 1)), version)
    finally:
        await table.close()
    code, _, err = await run_cli_to_end(
        "cluster", "status", "--membership", "sqlite:cluster.db", "--data-dir", str(tmp_path),
        "--cluster-id", "prd")
    assert code == 2
    assert "cluster prd has no silo" in err and "prod" in err
