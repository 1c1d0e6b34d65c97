"""silo.config: TOML + environment + flags -> SiloOptions, with errors naming key and fix."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from orleanspy import ConfigurationError, SiloOptions
from silo.config import find_config_file, load_config, parse_env
from silo.filters_config import resolve_filters


def write(tmp_path: Path, text: str, name: str = "orleanspy.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_load_config_without_sources_gives_silo_defaults() -> None:
    config = load_config(environ={})
    assert config.options == SiloOptions()
    assert config.app == ()
    assert config.sources["port"] == "default"


def test_load_config_precedence_defaults_file_env_flags(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        'cluster_id = "from-file"\n'
        "[silo]\n"
        "port = 1111\n"
        "gateway_port = 2222\n"
        'secret = "file-secret"\n'
        'log_level = "debug"\n',
    )
    environ = {"ORLEANSPY_PORT": "3333", "ORLEANSPY_GATEWAY_PORT": "4444"}
    flags = {"gateway_port": 5555, "cluster_id": None}  # None: the flag was not given
    config = load_config(
        path, flags, environ=environ, defaults={"storage": "sqlite:x.db", "log_level": "error"}
    )
    opts = config.options
    assert opts.storage == "sqlite:x.db"  # default layer only
    assert opts.log_level == "debug"  # file beats defaults
    assert opts.cluster_id == "from-file"
    assert opts.secret == "file-secret"
    assert opts.port == 3333  # env beats file
    assert opts.gateway_port == 5555  # flag beats env and file
    assert config.sources["gateway_port"] == "flag --gateway-port"
    assert config.sources["port"] == "environment variable ORLEANSPY_PORT"
    assert config.sources["secret"] == f"{path}: key silo.secret"
    assert config.sources["storage"] == "default storage"


def test_load_config_app_from_highest_layer_replaces_lower(tmp_path: Path) -> None:
    path = write(tmp_path, 'app = ["a.grains", "b.grains"]\n')
    assert load_config(path, environ={}).app == ("a.grains", "b.grains")
    env = {"ORLEANSPY_APP": "c.grains, d.grains"}
    assert load_config(path, environ=env).app == ("c.grains", "d.grains")
    assert load_config(path, {"app": ["e.grains"]}, environ=env).app == ("e.grains",)


def test_load_config_env_converts_types_and_none() -> None:
    env = {
        "ORLEANSPY_RESPONSE_TIMEOUT": "2.5",
        "ORLEANSPY_MAILBOX_CAPACITY": "7",
        "ORLEANSPY_GATEWAY_PORT": "none",
        "ORLEANSPY_SECRET": "s",
        "ORLEANSPY_SOMETHING_ELSE": "ignored: other components own other variables",
    }
    opts = load_config(environ=env).options
    assert opts.response_timeout == 2.5
    assert opts.mailbox_capacity == 7
    assert opts.gateway_port is None
    assert opts.secret == "s"


def test_load_config_toml_int_is_accepted_for_float_field(tmp_path: Path) -> None:
    path = write(tmp_path, "[silo]\nminimum_reminder_period = 1\n")
    opts = load_config(path, environ={}).options
    assert opts.minimum_reminder_period == 1.0
    assert isinstance(opts.minimum_reminder_period, float)


def test_load_config_relative_data_dir_resolves_against_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, 'data_dir = "state"\n')
    assert load_config(path, environ={}).options.data_dir == str(tmp_path / "state")
    flagged = load_config(path, {"data_dir": "elsewhere"}, environ={})
    assert flagged.options.data_dir == "elsewhere"


def test_load_config_unknown_key_in_table_suggests_the_field(tmp_path: Path) -> None:
    path = write(tmp_path, "[silo]\ngateway_prot = 30001\n")
    with pytest.raises(ConfigurationError) as info:
        load_config(path, environ={})
    assert str(info.value) == (
        f"{path}: key silo.gateway_prot is unknown; did you mean gateway_port?"
    )


def test_load_config_unknown_top_level_key_suggests_the_field(tmp_path: Path) -> None:
    path = write(tmp_path, 'clusterid = "x"\n')
    with pytest.raises(ConfigurationError, match=r"key clusterid is unknown; did you mean "
                       r"cluster_id\?"):
        load_config(path, environ={})


def test_load_config_unknown_key_without_close_match_lists_known_keys(tmp_path: Path) -> None:
    path = write(tmp_path, "[silo]\nzzzz = 1\n")
    with pytest.raises(ConfigurationError,
                       match=r"key silo.zzzz is unknown; known keys: advertise, "
                       r"allow_readable_secrets, app, "):
        load_config(path, environ={})


def test_load_config_unknown_table_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "[sillo]\nport = 1\n")
    with pytest.raises(ConfigurationError, match=r"key sillo is unknown; did you mean silo\?"):
        load_config(path, environ={})


def test_load_config_wrong_type_names_file_key_and_fix(tmp_path: Path) -> None:
    path = write(tmp_path, '[silo]\nport = "11111"\n')
    with pytest.raises(ConfigurationError) as info:
        load_config(path, environ={})
    message = str(info.value)
    assert message.startswith(f"{path}: key silo.port must be an integer, not a string")
    assert "port = 11111" in message


def test_load_config_bool_is_not_an_integer(tmp_path: Path) -> None:
    path = write(tmp_path, "mailbox_capacity = true\n")
    with pytest.raises(ConfigurationError, match="key mailbox_capacity must be an integer, "
                       "not a boolean"):
        load_config(path, environ={})


def test_load_config_bad_value_names_the_key(tmp_path: Path) -> None:
    path = write(tmp_path, '[silo]\nlog_format = "xml"\n')
    with pytest.raises(ConfigurationError) as info:
        load_config(path, environ={})
    message = str(info.value)
    assert message.startswith(f"{path}: key silo.log_format is invalid:")
    assert "'xml'" in message
    assert "'console' or 'json'" in message


def test_load_config_bad_env_value_names_the_variable() -> None:
    with pytest.raises(ConfigurationError, match="environment variable ORLEANSPY_PORT = 'abc' "
                       "must be an integer"):
        load_config(environ={"ORLEANSPY_PORT": "abc"})
    with pytest.raises(ConfigurationError, match=r"environment variable "
                       r"ORLEANSPY_COLLECTION_AGE is invalid: .*must be > 0"):
        load_config(environ={"ORLEANSPY_COLLECTION_AGE": "-1"})


def test_load_config_bad_flag_value_names_the_flag() -> None:
    with pytest.raises(ConfigurationError, match=r"flag --idle-age is invalid: .*collection_age"):
        load_config(
            None, {"collection_age": 0.0}, environ={}, flag_names={"collection_age": "--idle-age"}
        )


def test_load_config_key_in_both_places_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "port = 1\n[silo]\nport = 2\n")
    with pytest.raises(ConfigurationError, match="key port is set both at the top level and "
                       r"in \[silo\]; keep one"):
        load_config(path, environ={})


def test_load_config_app_must_be_module_names(tmp_path: Path) -> None:
    path = write(tmp_path, 'app = ["myapp/grains.py"]\n')
    with pytest.raises(ConfigurationError, match=r"'myapp/grains\.py' is not a module name"):
        load_config(path, environ={})
    path = write(tmp_path, "app = 3\n")
    with pytest.raises(ConfigurationError, match="key app must be an array of module names"):
        load_config(path, environ={})


def test_load_config_invalid_toml_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "[silo\nport = 1\n")
    with pytest.raises(ConfigurationError, match=re.escape(f"{path}: not valid TOML")):
        load_config(path, environ={})


def test_load_config_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="does not exist"):
        load_config(tmp_path / "absent.toml", environ={})


def test_parse_env_ignores_empty_app() -> None:
    assert parse_env({"ORLEANSPY_APP": " "}) == {}


def test_find_config_file_order(tmp_path: Path) -> None:
    assert find_config_file(None, {}, tmp_path) is None
    local = write(tmp_path, "")
    assert find_config_file(None, {}, tmp_path) == local
    assert find_config_file(None, {"ORLEANSPY_CONFIG": "/e.toml"}, tmp_path) == Path("/e.toml")
    assert find_config_file("x.toml", {"ORLEANSPY_CONFIG": "/e.toml"}, tmp_path) == Path("x.toml")


def test_load_config_bad_backend_url_names_the_key_and_the_forms(tmp_path: Path) -> None:
    path = write(tmp_path, '[silo]\nstorage = "postgres:db"\n')
    with pytest.raises(ConfigurationError) as info:
        load_config(path, environ={})
    message = str(info.value)
    assert message.startswith(f"{path}: key silo.storage = 'postgres:db': unknown back end")
    assert "memory | postgresql://HOST:PORT/DB | redis://HOST:PORT/DB | sqlite:PATH" in message
    with pytest.raises(ConfigurationError, match=r"environment variable ORLEANSPY_MEMBERSHIP "
                       r"= 'sqlite:': no file named; use memory \| postgresql://HOST:PORT/DB \| "
                       r"redis://HOST:PORT/DB \| "
                       r"sqlite:PATH"):
        load_config(environ={"ORLEANSPY_MEMBERSHIP": "sqlite:"})
    with pytest.raises(ConfigurationError, match=r"flag --membership = 'etcd://h': unknown"):
        load_config(None, {"membership": "etcd://h"}, environ={})
    redis = load_config(None, {"reminders": "redis://h:6379/0?prefix=p"}, environ={})
    assert redis.options.reminders == "redis://h:6379/0?prefix=p"


def test_stream_adapter_urls_resolve_against_the_data_dir(tmp_path: Path) -> None:
    path = write(tmp_path, '[silo]\ndata_dir = "d"\n[streams.a]\nadapter = "sqlite:s.db"\n'
                 '[streams.b]\nadapter = "memory"\n[streams.c]\nadapter = "generator"\n'
                 '[streams.d]\nadapter = "redis://h:6379/0?prefix=p"\n'
                 '[streams.e]\nadapter = "nats://h:4222?prefix=p"\n'
                 '[streams.f]\nadapter = "postgresql://u@h:5432/db?schema=s"\n')
    streams = load_config(path, environ={}).streams
    assert set(streams) == {"a", "b", "c", "d", "e", "f"}
    factories = {name: type(p.adapter_factory).__name__ for name, p in streams.items()}
    assert factories == {"a": "SqliteAdapterFactory", "b": "MemoryAdapterFactory",
                         "c": "GeneratorAdapterFactory", "d": "RedisAdapterFactory",
                         "e": "NatsAdapterFactory", "f": "PostgresAdapterFactory"}
    assert streams["a"].adapter_factory._path == str(tmp_path / "d" / "s.db")


def test_bad_stream_adapter_names_the_key_and_the_forms(tmp_path: Path) -> None:
    path = write(tmp_path, '[streams.events]\nadapter = "kafka://x"\n')
    with pytest.raises(ConfigurationError) as info:
        load_config(path, environ={})
    message = str(info.value)
    assert message.startswith(f"{path}: streams.events.adapter = 'kafka://x': unknown back end")
    assert ("generator | memory | nats://HOST:PORT | postgresql://HOST:PORT/DB | "
            "redis://HOST:PORT/DB | sqlite:PATH") in message


def test_filters_table_is_read_and_checked(tmp_path: Path) -> None:
    path = write(tmp_path, '[filters]\nincoming = ["tests.integration.context_app:'
                           'tenant_required"]\noutgoing = "json:dumps"\n')
    config = load_config(path, environ={})
    assert config.filters.incoming == ("tests.integration.context_app:tenant_required",)
    assert config.filters.outgoing == ("json:dumps",)
    incoming, _ = resolve_filters(dataclasses.replace(config.filters, outgoing=()))
    assert [f.__name__ for f in incoming] == ["tenant_required"]
    # a plain function is refused when the silo imports it, naming the key
    with pytest.raises(ConfigurationError,
                       match=r"key filters\.outgoing: 'json:dumps' is not an async function"):
        resolve_filters(config.filters)


@pytest.mark.parametrize(("text", "error"), [
    ('[filters]\nincomming = ["a:b"]\n', r"key filters\.incomming is unknown; known keys"),
    ('[filters]\nincoming = ["myapp/filters.py"]\n', r"is not a \"module:function\" name"),
    ('[filters]\nincoming = [1]\n', r"must be an array of \"module:function\" names"),
    ('filters = "a:b"\n', r"key filters must be a table"),
])
def test_a_bad_filters_table_names_the_key_and_the_fix(tmp_path: Path, text: str,
                                                       error: str) -> None:
    with pytest.raises(ConfigurationError, match=error):
        load_config(write(tmp_path, text), environ={})


def test_a_filter_that_does_not_import_names_the_entry(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, '[filters]\nincoming = ["no_such_module_x:f", '
                                         '"json:no_such_function"]\n'), environ={})
    with pytest.raises(ConfigurationError, match=r"module no_such_module_x cannot be imported"):
        resolve_filters(config.filters)
    only = load_config(write(tmp_path, '[filters]\nincoming = ["json:no_such_function"]\n'),
                       environ={})
    with pytest.raises(ConfigurationError, match=r"json has no no_such_function"):
        resolve_filters(only.filters)
