"""Storage faults seen from the command line and from a client: a damaged file stops the
silo before it starts with one line naming it (exit code 2); a state value changed on disk
fails its grain's activation instead of being served, and the silo keeps serving the rest."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from orleanspy import ActivationFailedError, RemoteGrainError

from .silo_process import SiloLauncher, free_port, run_cli_to_end

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("damage", ["garbage", "folder", "other_schema"])
async def test_silo_start_with_an_unusable_file_says_which_in_one_line(
    tmp_path: Path, damage: str
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    db = data / "orleanspy.db"
    if damage == "garbage":
        db.write_bytes(b"\x00garbage\xff" * 1000)
    elif damage == "folder":
        db.mkdir()
    else:
        with closing(sqlite3.connect(db)) as conn, conn:
            conn.execute("CREATE TABLE grain_state (name TEXT)")
    code, _out, err = await run_cli_to_end(
        "silo", "start", "--app", "tests.integration.app", "--data-dir", str(data),
        "--gateway-port", str(free_port()), "--port", str(free_port()), timeout=30,
    )
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2, err
    assert "Traceback" not in err
    assert len(lines) == 1, err
    assert str(db) in lines[0]


async def test_a_state_value_changed_on_disk_is_not_served(silo_launcher: SiloLauncher) -> None:
    silo = await silo_launcher.start()
    async with silo.client() as client:
        assert await client.get_grain("Counter", "victim").add(5) == 5
        assert await client.get_grain("Counter", "bystander").add(1) == 1
    await silo.terminate()

    with closing(sqlite3.connect(silo_launcher.data_dir / "orleanspy.db")) as db, db:
        rows = db.execute("SELECT grain_id, data FROM grain_state").fetchall()
        (victim_id, data), = [r for r in rows if "victim" in r[0]]
        tampered = bytes(data).replace(b"\x05", b"\x63")  # value 5 -> 99 in place
        assert tampered != bytes(data)
        db.execute("UPDATE grain_state SET data = ? WHERE grain_id = ?", (tampered, victim_id))

    silo = await silo_launcher.start()
    async with silo.client() as client:
        with pytest.raises((ActivationFailedError, RemoteGrainError), match="checksum"):
            await client.get_grain("Counter", "victim").get()
        assert await client.get_grain("Counter", "bystander").get() == 1
    assert silo.alive
    assert "StorageCorruptionError" in silo.log_text() or "checksum" in silo.log_text()
