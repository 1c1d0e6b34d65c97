"""Silo configuration: defaults < TOML file < ``ORLEANSPY_*`` environment < command-line flags.

The TOML file holds ``SiloOptions`` field names, either at the top level or in a ``[silo]``
table, plus ``app = ["module", ...]`` (the grain modules to host)::

    app = ["myapp.grains"]

    [silo]
    cluster_id = "prod"
    gateway_port = 30000
    storage = "sqlite:orleanspy.db"   # relative to data_dir (in a cluster: to this file's folder)
    data_dir = "data"                 # relative to this file's folder

Every value is checked where it is read, so an error names its source (file and key,
environment variable or flag) and says how to fix it. Unknown keys are errors, with the
closest known key suggested; a relative ``data_dir`` in a file resolves against the file's
folder, one from the environment or a flag against the working directory. In a cluster
every silo must open the same SQLite files: see ``_shared_paths``.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from orleanspy import ConfigurationError, SiloOptions
from orleanspy._util.urls import anchor_sqlite, parse_backend_url, relative_sqlite, sqlite_file
from orleanspy.runtime.options import BACKENDS_OF
from orleanspy.spark.lake import check_lake
from orleanspy.spark.options import SparkOptions
from silo.filters_config import FILTERS_KEY, FilterSpecs, parse_filters
from silo.spark_config import parse_spark
from silo.streams_config import parse_streams

__all__ = [
    "APP_KEY",
    "DEFAULT_CONFIG_FILE",
    "ENV_PREFIX",
    "SiloConfig",
    "find_config_file",
    "load_config",
    "parse_env",
    "parse_toml",
]

ENV_PREFIX: Final = "ORLEANSPY_"
DEFAULT_CONFIG_FILE: Final = "orleanspy.toml"
APP_KEY: Final = "app"
_TABLE: Final = "silo"
_STREAMS: Final = "streams"
_SPARK: Final = "spark"
_CONFIG_ENV: Final = ENV_PREFIX + "CONFIG"
_MODULE_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")

_FIELDS: Final = SiloOptions.field_names()
# back-end URL fields -> a valid value quoted in their errors
_URL_FIELDS: Final = {"storage": "sqlite:orleanspy.db", "reminders": "sqlite:orleanspy.db",
                      "membership": "sqlite:cluster.db"}
_TYPES: Final[dict[str, Any]] = typing.get_type_hints(SiloOptions)


@dataclass(frozen=True, slots=True)
class _Setting:
    """One configured value and where it came from (for error messages and logs)."""

    value: Any
    source: str
    #: a config file's folder, for a value read from that file
    folder: str | None = None


_Layer = dict[str, _Setting]


@dataclass(frozen=True, slots=True, kw_only=True)
class SiloConfig:
    """The outcome of ``load_config``: options, app modules and where each value came from."""

    options: SiloOptions
    app: tuple[str, ...] = ()
    streams: Mapping[str, Any] = field(default_factory=dict)
    spark: SparkOptions | None = None  # the [spark] table (silo/spark_config.py)
    filters: FilterSpecs = field(default_factory=FilterSpecs)  # [filters]: filters_config.py
    config_file: Path | None = None
    sources: Mapping[str, str] = field(default_factory=dict)


# -- types -----------------------------------------------------------------------------------
def _base_type(name: str) -> tuple[type, bool]:
    """The scalar type of a SiloOptions field and whether it also accepts None."""
    hint = _TYPES[name]
    if isinstance(hint, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0], True
    return hint, False


_KIND_NAMES: Final = {bool: "true or false", int: "an integer", float: "a number",
                      str: "a string"}
_BOOL_WORDS: Final = {"true": True, "1": True, "yes": True, "on": True,
                      "false": False, "0": False, "no": False, "off": False}


def _kind_of(value: object) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
             list: "an array", dict: "a table"}
    return names.get(type(value), f"a {type(value).__name__}")


def _example(name: str) -> str:
    default = getattr(SiloOptions(), name)
    if default is None:
        default = 30000 if _base_type(name)[0] is int else "..."
    if isinstance(default, str):
        return f'{name} = "{default}"'
    return f"{name} = {default!r}"


def _convert_toml(name: str, value: object, source: str) -> object:
    kind, _ = _base_type(name)
    if kind is float and type(value) in (int, float):
        return float(value)  # type: ignore[arg-type]
    if type(value) is kind:
        return value
    raise ConfigurationError(
        f"{source} must be {_KIND_NAMES[kind]}, not {_kind_of(value)} ({value!r}); "
        f"write e.g. {_example(name)}"
    )


def _convert_text(name: str, text: str, source: str) -> object:
    kind, optional = _base_type(name)
    if optional and text.strip().lower() in ("", "none"):
        return None
    if kind is str:
        return text
    if kind is bool:
        word = text.strip().lower()
        if word not in _BOOL_WORDS:
            raise ConfigurationError(f"{source} = {text!r} must be true or false")
        return _BOOL_WORDS[word]
    try:
        return kind(text.strip())
    except ValueError:
        default = getattr(SiloOptions(), name)
        raise ConfigurationError(
            f"{source} = {text!r} must be {_KIND_NAMES[kind]}"
            + ("" if default is None else f", e.g. {default!r}")
            + (" (or 'none')" if optional else "")
        ) from None


def _validate(name: str, setting: _Setting) -> None:
    """Check one value with SiloOptions' own rules, naming the source on failure; a back-end
    URL is parsed by the one URL parser first, so its error names the accepted forms."""
    if name in _URL_FIELDS and isinstance(setting.value, str):
        parse_backend_url(setting.value, key=setting.source, allow=BACKENDS_OF[name],
                          example=_URL_FIELDS[name])
        return  # where a relative SQLite path resolves is decided after merging
    values = {name: setting.value}
    paired = _PAIRED.get(name)
    if paired is not None and isinstance(setting.value, int):
        other, admitting = paired
        values[other] = admitting(setting.value)
    try:
        SiloOptions(**values)
    except (ConfigurationError, TypeError) as exc:
        raise ConfigurationError(f"{setting.source} is invalid: {exc}") from None


#: settings whose rule compares them with another (``SiloOptions``): each is checked alone
#: with the other at a value that admits it, and the pair once every layer is merged
_PAIRED: dict[str, tuple[str, Callable[[int], int]]] = {
    "max_connection_requests": ("max_client_requests", lambda value: value),
    "max_client_requests": ("max_connection_requests", lambda value: 2),
}


def _app_modules(value: object, source: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(m, str) for m in items):
        raise ConfigurationError(
            f"{source} must be an array of module names, not {_kind_of(value)} ({value!r}); "
            'write e.g. app = ["myapp.grains"]'
        )
    for module in items:
        if not _MODULE_NAME.fullmatch(module):
            raise ConfigurationError(
                f"{source}: {module!r} is not a module name; write a dotted import path such "
                "as myapp.grains (not a file path)"
            )
    return tuple(items)


def _unknown(key: str, known: Sequence[str], where: str) -> ConfigurationError:
    close = difflib.get_close_matches(key.rsplit(".", 1)[-1], known, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}?" if close else "known keys: " + ", ".join(sorted(known))
    return ConfigurationError(f"{where}: key {key} is unknown; {hint}")


# -- layers ----------------------------------------------------------------------------------
def parse_toml(path: Path) -> _Layer:
    """Read a config file into checked settings (raises ConfigurationError)."""
    label = str(path)
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigurationError(
            f"config file {label} does not exist; check --config or {_CONFIG_ENV}"
        ) from None
    except OSError as exc:
        raise ConfigurationError(f"config file {label} cannot be read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"{label}: not valid TOML: {exc}") from None

    entries: dict[str, tuple[str, object]] = {}  # name -> (key as written, value)
    top_known = [*_FIELDS, APP_KEY, _TABLE, _STREAMS, _SPARK, FILTERS_KEY]
    for key, value in data.items():
        if key in (_STREAMS, _SPARK, FILTERS_KEY):
            continue  # [streams.NAME]: silo/streams_config.py; [spark], [filters]: *_config.py
        if key == _TABLE:
            if not isinstance(value, dict):
                raise ConfigurationError(
                    f"{label}: key {_TABLE} must be a table ([{_TABLE}]), not {_kind_of(value)}"
                )
            continue
        if key not in top_known:
            raise _unknown(key, top_known, label)
        entries[key] = (key, value)
    table = data.get(_TABLE, {})
    table_known = [*_FIELDS, APP_KEY]
    for key, value in table.items():
        dotted = f"{_TABLE}.{key}"
        if key not in table_known:
            raise _unknown(dotted, table_known, label)
        if key in entries:
            raise ConfigurationError(
                f"{label}: key {key} is set both at the top level and in [{_TABLE}]; keep one"
            )
        entries[key] = (dotted, value)

    layer: _Layer = {}
    for name, (written, value) in entries.items():
        source = f"{label}: key {written}"
        if name == APP_KEY:
            layer[name] = _Setting(_app_modules(value, source), source)
            continue
        converted = _convert_toml(name, value, source)
        if name == "data_dir" and isinstance(converted, str):
            converted = str(path.parent / converted)  # absolute paths stay absolute
        layer[name] = _Setting(converted, source, str(path.parent.resolve()))
    return layer


def _shared_paths(merged: _Layer) -> None:
    """A clustered silo's back ends are shared by every silo, so a SQLite file must be the
    same file for all of them, whatever each silo's folder or data dir. A relative path from
    a config file resolves against the file's folder; the CLI's default storage and
    reminders go beside the membership table (or onto its Redis server); a relative path
    given any other way is refused (raises ConfigurationError naming where it came from)."""
    for name in ("membership", "storage", "reminders"):
        setting = merged.get(name)
        if setting is None:
            continue
        relative = relative_sqlite(setting.value)
        if relative is None:
            continue
        if setting.folder is not None:
            merged[name] = _Setting(anchor_sqlite(setting.value, setting.folder),
                                    setting.source)
        elif setting.source.startswith("default") and name != "membership":
            membership = str(merged["membership"].value)
            table = sqlite_file(membership)
            beside = (membership if table is None
                      else anchor_sqlite(setting.value, os.path.dirname(table)))
            merged[name] = _Setting(beside, "default (shared: beside the membership table)")
        else:
            raise ConfigurationError(
                f"{setting.source} = {setting.value!r}: a relative SQLite path in a cluster "
                "would name a different file on each silo (it depends on the silo's folder); "
                "every silo must open the same file: give an absolute path (e.g. "
                f"sqlite:/srv/shop/{os.path.basename(relative)}), set it in the config file "
                "(a relative path there resolves against the file's folder), or use a server "
                "the silos share (redis://HOST:PORT/DB)"
            )


def parse_env(environ: Mapping[str, str]) -> _Layer:
    """Settings from ``ORLEANSPY_<FIELD>`` variables; ``ORLEANSPY_APP`` is comma-separated.

    Other ``ORLEANSPY_*`` variables are left alone: other components may define their own.
    """
    layer: _Layer = {}
    for name in _FIELDS:
        var = ENV_PREFIX + name.upper()
        if var in environ:
            source = f"environment variable {var}"
            layer[name] = _Setting(_convert_text(name, environ[var], source), source)
    var = ENV_PREFIX + APP_KEY.upper()
    if environ.get(var, "").strip():
        modules = [m.strip() for m in environ[var].split(",") if m.strip()]
        source = f"environment variable {var}"
        layer[APP_KEY] = _Setting(_app_modules(modules, source), source)
    return layer


def _parse_mapping(
    values: Mapping[str, Any], label: str, names: Mapping[str, str] | None = None
) -> _Layer:
    layer: _Layer = {}
    known = [*_FIELDS, APP_KEY]
    for name, value in values.items():
        if value is None:
            continue
        if name not in known:
            raise _unknown(name, known, label)
        flag = (names or {}).get(name)
        source = f"{label} {flag}" if flag else f"{label} {name}"
        if name == APP_KEY:
            layer[name] = _Setting(_app_modules(list(value), source), source)
        else:
            layer[name] = _Setting(value, source)
    return layer


def find_config_file(
    explicit: str | os.PathLike[str] | None,
    environ: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> Path | None:
    """The config file to read: ``--config``, else ``$ORLEANSPY_CONFIG``, else
    ``./orleanspy.toml`` if it exists, else None."""
    if explicit is not None:
        return Path(explicit)
    env = os.environ if environ is None else environ
    if env.get(_CONFIG_ENV):
        return Path(env[_CONFIG_ENV])
    candidate = Path(cwd if cwd is not None else os.getcwd()) / DEFAULT_CONFIG_FILE
    return candidate if candidate.is_file() else None


def load_config(
    config_file: str | os.PathLike[str] | None = None,
    flags: Mapping[str, Any] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    defaults: Mapping[str, Any] | None = None,
    flag_names: Mapping[str, str] | None = None,
) -> SiloConfig:
    """Merge the layers into ``SiloOptions`` (raises ``ConfigurationError``).

    Args:
        config_file: a TOML file, or None for none (see ``find_config_file``).
        flags: field name (or ``app``) -> value from the command line; None values are unset.
        environ: the environment (default ``os.environ``).
        defaults: host defaults that replace SiloOptions' own (the CLI uses SQLite).
        flag_names: field name -> flag spelling for messages (default ``--field-name``).

    Returns:
        The options, the app modules (possibly empty) and the source of every value.
    """
    names = {n: "--" + n.replace("_", "-") for n in [*_FIELDS, APP_KEY]}
    names.update(flag_names or {})
    path = Path(config_file) if config_file is not None else None
    layers: list[_Layer] = [
        _parse_mapping(defaults or {}, "default"),
        parse_toml(path) if path is not None else {},
        parse_env(os.environ if environ is None else environ),
        _parse_mapping(flags or {}, "flag", names),
    ]
    merged: _Layer = {}
    for layer in layers:
        for name, setting in layer.items():
            if name != APP_KEY:
                _validate(name, setting)
            merged[name] = setting
    app_setting = merged.pop(APP_KEY, None)
    clustered = merged.get("membership") is not None and merged["membership"].value is not None
    if clustered:
        _shared_paths(merged)
    streams: dict[str, Any] = {}
    spark: SparkOptions | None = None
    filters = FilterSpecs()
    try:
        options = SiloOptions(**{name: s.value for name, s in merged.items()})
    except ConfigurationError as exc:  # settings valid alone, not together (``_PAIRED``)
        named = [f"{n} from {s.source}" for n, s in merged.items() if n in str(exc)]
        raise ConfigurationError(
            f"invalid configuration: {exc} ({', '.join(named) or 'defaults'})") from None
    if path is not None:
        with path.open("rb") as f:
            document = tomllib.load(f)
        tables = document.get(_STREAMS)
        if tables is not None:
            # In a cluster the queues are shared: a relative SQLite path in the file resolves
            # against the file's folder, as the back ends above do.
            base = str(path.parent.resolve()) if clustered else options.data_dir
            streams = parse_streams(tables, base, str(path))
        if _SPARK in document:
            spark = parse_spark(document[_SPARK], str(path))
            if clustered:  # every silo and Spark must reach the same lake
                check_lake(spark.lake, str(merged["membership"].value),
                           key=f"{path}: {_SPARK}.lake")
        if FILTERS_KEY in document:
            filters = parse_filters(document[FILTERS_KEY], str(path))
    sources = {name: merged[name].source if name in merged else "default" for name in _FIELDS}
    if app_setting is not None:
        sources[APP_KEY] = app_setting.source
    return SiloConfig(
        options=options,
        app=tuple(app_setting.value) if app_setting is not None else (),
        config_file=path,
        sources=sources,
        streams=streams,
        spark=spark,
        filters=filters,
    )
