"""The silos of a cluster must open the same SQLite files, whatever their own folders: a
relative path in a config file resolves against the file's folder, the CLI's default storage
goes beside the membership table, and a relative path given any other way is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from orleanspy import ConfigurationError, SiloOptions
from silo.commands.common import CLI_DEFAULTS
from silo.config import load_config


def test_a_relative_membership_flag_is_refused_and_the_error_says_how_to_share_it() -> None:
    with pytest.raises(ConfigurationError) as info:
        load_config(None, {"membership": "sqlite:cluster.db", "data_dir": "/tmp/a"},
                    environ={}, defaults=CLI_DEFAULTS)

    text = str(info.value)
    assert "--membership" in text and "'sqlite:cluster.db'" in text
    assert "absolute path" in text and "config file" in text and "redis://" in text


def test_a_relative_storage_from_the_environment_is_refused_in_a_cluster() -> None:
    with pytest.raises(ConfigurationError, match="ORLEANSPY_STORAGE"):
        load_config(None, {"membership": "sqlite:/srv/c/cluster.db"},
                    environ={"ORLEANSPY_STORAGE": "sqlite:state.db"}, defaults=CLI_DEFAULTS)


def test_two_silos_from_one_config_file_with_different_data_dirs_share_every_file(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "conf"
    folder.mkdir()
    config = folder / "orleanspy.toml"
    config.write_text(
        'membership = "sqlite:cluster.db"\nreminders = "sqlite:state/reminders.db"\n'
        '[streams.s]\nadapter = "sqlite:streams.db"\n'
    )
    first = load_config(config, {"data_dir": str(tmp_path / "one")}, environ={},
                        defaults=CLI_DEFAULTS)
    second = load_config(config, {"data_dir": str(tmp_path / "two")}, environ={},
                         defaults=CLI_DEFAULTS)

    home = folder.resolve()
    for cfg in (first, second):
        assert cfg.options.membership == f"sqlite:{home / 'cluster.db'}"
        assert cfg.options.reminders == f"sqlite:{home / 'state' / 'reminders.db'}"
        # the CLI's default storage: beside the membership table, not in each data dir
        assert cfg.options.storage == f"sqlite:{home / 'orleanspy.db'}"
        assert cfg.streams["s"].adapter_factory._path == str(home / "streams.db")


def test_the_default_storage_of_a_redis_cluster_is_its_redis_server() -> None:
    url = "redis://127.0.0.1:6379/0?prefix=shop"
    options = load_config(None, {"membership": url}, environ={},
                          defaults=CLI_DEFAULTS).options

    assert options.storage == url and options.reminders == url


def test_a_lone_silo_keeps_relative_paths_in_its_data_dir(tmp_path: Path) -> None:
    options = load_config(None, {"data_dir": str(tmp_path)}, environ={},
                          defaults=CLI_DEFAULTS).options

    assert options.membership is None
    assert options.storage == "sqlite:orleanspy.db"  # resolved against data_dir on open


def test_silo_options_in_code_refuse_a_relative_path_in_a_cluster() -> None:
    with pytest.raises(ConfigurationError, match=r"SiloOptions.storage = 'sqlite:s.db'"):
        SiloOptions(membership="sqlite:/srv/c/cluster.db", storage="sqlite:s.db")
    with pytest.raises(ConfigurationError, match=r"SiloOptions.membership"):
        SiloOptions(membership="sqlite:cluster.db")
    assert SiloOptions(storage="sqlite:s.db").storage == "sqlite:s.db"  # a lone silo

