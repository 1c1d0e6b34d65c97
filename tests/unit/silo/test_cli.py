"""silo.cli: argument parsing helpers, help texts and configuration errors (no processes)."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import pytest

from silo.cli import main, parse_arg, parse_key
from silo.commands.common import render


@pytest.mark.parametrize(
    ("text", "value"),
    [("5", 5), ('"5"', "5"), ("hello", "hello"), ("[1, 2]", [1, 2]), ('{"a": null}',
     {"a": None}), ("true", True), ("2.5", 2.5), ("", "")],
)
def test_parse_arg_is_json_else_string(text: str, value: object) -> None:
    assert parse_arg(text) == value


def test_parse_key_auto_int_or_str_and_forced_types() -> None:
    assert parse_key("42") == 42
    assert parse_key("-7") == -7
    assert parse_key("alice") == "alice"
    assert parse_key("42", "str") == "42"
    u = uuid.uuid4()
    assert parse_key(str(u), "uuid") == u
    with pytest.raises(ValueError):
        parse_key("x", "int")


def test_render_json_with_fallbacks() -> None:
    @dataclasses.dataclass
    class Point:
        x: int
        y: int

    assert render({"p": Point(1, 2), "s": {3, 1}, "t": (1, "a")}) == (
        '{"p": {"x": 1, "y": 2}, "s": [1, 3], "t": [1, "a"]}'
    )
    assert render(Path("/x")) == "PosixPath('/x')"
    assert render({(1, 2): "tuple key"}) == "{(1, 2): 'tuple key'}"


@pytest.mark.parametrize("argv", [["--help"], ["silo", "start", "--help"], ["call", "--help"]])
def test_main_help_texts_exit_0(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 0
    assert "usage: orleanspy" in capsys.readouterr().out


def test_main_without_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: orleanspy" in capsys.readouterr().err


def test_main_silo_start_without_app_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORLEANSPY_APP", raising=False)
    monkeypatch.delenv("ORLEANSPY_CONFIG", raising=False)
    assert main(["silo", "start"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no grain modules to host: pass --app MODULE")
    assert "Traceback" not in err


def test_main_bad_config_file_prints_one_line_and_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "orleanspy.toml").write_text('app = ["x"]\n[silo]\ngateway_prot = 1\n')
    assert main(["silo", "start"]) == 2  # ./orleanspy.toml is found without --config
    err = capsys.readouterr().err
    assert err == (
        f"error: {tmp_path / 'orleanspy.toml'}: key silo.gateway_prot is unknown; "
        "did you mean gateway_port?\n"
    )


def test_main_call_bad_uuid_key_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["call", "--key-type", "uuid", "Counter", "nope", "get"]) == 2
    assert "KEY 'nope' is not a valid uuid" in capsys.readouterr().err


def test_reminders_list_reads_the_table_a_clustered_silo_of_the_folder_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from silo.commands.common import CLI_DEFAULTS
    from silo.config import find_config_file, load_config

    (tmp_path / "orleanspy.toml").write_text('membership = "sqlite:cluster.db"\n')
    monkeypatch.chdir(tmp_path)
    silo_uses = load_config(find_config_file(None), {}, defaults=CLI_DEFAULTS).options.reminders
    assert silo_uses == f"sqlite:{tmp_path / 'orleanspy.db'}"  # beside the membership table
    assert main(["reminders", "list"]) == 2  # the silos have not written it yet
    assert f"no reminders table at {tmp_path / 'orleanspy.db'}:" in capsys.readouterr().err


@pytest.mark.parametrize("command", [
    ["call", "Account", "alice", "balance"], ["cluster", "status"], ["grains", "top"],
    ["grains", "show", "Account", "alice"], ["streams", "status"],
])
def test_client_commands_find_the_cluster_by_flag_then_environment_then_file(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in ("CONFIG", "MEMBERSHIP", "CLUSTER_ID", "SECRET", "DATA_DIR", "GATEWAY_PORT"):
        monkeypatch.delenv(f"ORLEANSPY_{name}", raising=False)
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "orleanspy.toml"
    config.write_text('membership = "sqlite:from-file.db"\n')

    def error_of(*extra: str) -> str:
        assert main([*command, *extra]) == 2
        (line,) = capsys.readouterr().err.splitlines()
        return line

    # no table exists: each error names the table it looked for and where that came from
    told = error_of()
    assert str(tmp_path / "from-file.db") in told and f"{config}: key membership" in told
    monkeypatch.setenv("ORLEANSPY_MEMBERSHIP", f"sqlite:{tmp_path / 'from-env.db'}")
    told = error_of()
    assert str(tmp_path / "from-env.db") in told
    assert "environment variable ORLEANSPY_MEMBERSHIP" in told
    told = error_of("--membership", f"sqlite:{tmp_path / 'from-flag.db'}")
    assert str(tmp_path / "from-flag.db") in told and "--membership" in told
    assert "ORLEANSPY_MEMBERSHIP" not in told
    assert not any(tmp_path.glob("*.db"))  # a tool creates no table
