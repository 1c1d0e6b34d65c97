"""Stream providers from the config file: ``[streams.NAME]`` tables → PersistentStreamProvider.

Example::

    [streams.events]
    adapter = "sqlite:streams.db"     # memory | generator | sqlite:PATH | redis://HOST:PORT/DB
                                      # | nats://HOST:PORT?prefix=P (JetStream; needs nats-py)
                                      # | postgresql://HOST:PORT/DB?schema=S
    total_queues = 8
    cache_size = 4096
    flow_control = "min"

    [streams.events.namespaces.clicks]
    flow_control = "tagged,group=archive,min=2,timeout=2s"

    [streams.load]
    adapter = "generator"
    [streams.load.generator]
    namespace = "generated"
    streams_per_queue = 1
    events_per_stream = 100
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Final

from orleanspy import ConfigurationError
from orleanspy._util.urls import parse_backend_url
from orleanspy.streams.adapters import (
    GeneratorAdapterFactory,
    GeneratorOptions,
    MemoryAdapterFactory,
    RedisAdapterFactory,
    SqliteAdapterFactory,
)
from orleanspy.streams.adapters.base import QueueAdapterFactory
from orleanspy.streams.adapters.postgres import PostgresAdapterFactory
from orleanspy.streams.options import StreamProviderOptions
from orleanspy.streams.provider import PersistentStreamProvider

__all__ = ["STREAMS_KEY", "parse_streams"]

STREAMS_KEY: Final = "streams"
_OPTION_FIELDS: Final = tuple(
    f.name for f in dataclasses.fields(StreamProviderOptions) if f.name != "namespace_flow_control"
)
_GENERATOR_FIELDS: Final = ("namespace", "streams_per_queue", "events_per_stream")
_KNOWN: Final = (*_OPTION_FIELDS, "adapter", "namespaces", "generator")
_ADAPTER_BACKENDS: Final = frozenset({"memory", "sqlite", "redis", "nats", "postgres"})
_ADAPTER_WORDS: Final = frozenset({"generator"})


def _unknown(where: str, key: str, known: tuple[str, ...]) -> ConfigurationError:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}?" if close else "known keys: " + ", ".join(sorted(known))
    return ConfigurationError(f"{where}: key {key} is unknown; {hint}")


def _adapter(url: Any, where: str, data_dir: str, table: dict[str, Any]) -> QueueAdapterFactory:
    parsed = parse_backend_url(url, key=f"{where}.adapter", data_dir=data_dir,
                               allow=_ADAPTER_BACKENDS, words=_ADAPTER_WORDS,
                               example="sqlite:streams.db")
    if parsed.scheme == "memory":
        return MemoryAdapterFactory()
    if parsed.scheme == "redis":
        return RedisAdapterFactory(parsed.text)
    if parsed.scheme == "nats":
        try:  # the optional nats-py client: imported only when configured
            from orleanspy.streams.adapters.nats import NatsAdapterFactory
        except ImportError as exc:
            raise ConfigurationError(
                f"{where}.adapter = {url!r} needs the NATS client: pip install "
                f"'orleanspy[nats]' ({exc})") from None
        return NatsAdapterFactory(parsed.text)
    if parsed.scheme == "postgres":
        return PostgresAdapterFactory(parsed.text)
    if parsed.scheme == "word":  # generator
        gen = table.get("generator", {})
        if not isinstance(gen, dict):
            raise ConfigurationError(f"{where}.generator must be a table")
        for key in gen:
            if key not in _GENERATOR_FIELDS:
                raise _unknown(f"{where}.generator", key, _GENERATOR_FIELDS)
        try:
            return GeneratorAdapterFactory(GeneratorOptions(**gen))
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"{where}.generator: {exc}") from None
    return SqliteAdapterFactory(parsed.path)


def parse_streams(
    tables: Any, data_dir: str, label: str = "config"
) -> dict[str, PersistentStreamProvider]:
    """Build the providers of a ``streams`` table (raises ``ConfigurationError``)."""
    if not isinstance(tables, dict):
        raise ConfigurationError(f"{label}: key {STREAMS_KEY} must hold [streams.NAME] tables")
    providers: dict[str, PersistentStreamProvider] = {}
    for name, table in tables.items():
        where = f"{label}: streams.{name}"
        if not isinstance(table, dict):
            raise ConfigurationError(f"{where} must be a table ([streams.{name}])")
        for key in table:
            if key not in _KNOWN:
                raise _unknown(where, key, _KNOWN)
        options: dict[str, Any] = {k: table[k] for k in _OPTION_FIELDS if k in table}
        namespaces = table.get("namespaces", {})
        if not isinstance(namespaces, dict):
            raise ConfigurationError(f"{where}.namespaces must hold [..namespaces.NS] tables")
        per_ns: dict[str, Any] = {}
        for ns, ns_table in namespaces.items():
            if not isinstance(ns_table, dict) or set(ns_table) - {"flow_control"}:
                raise ConfigurationError(
                    f"{where}.namespaces.{ns}: only flow_control may be set per namespace"
                )
            if "flow_control" in ns_table:
                per_ns[ns] = ns_table["flow_control"]
        try:
            opts = StreamProviderOptions(**options, namespace_flow_control=per_ns)
        except TypeError as exc:
            raise ConfigurationError(f"{where}: {exc}") from None
        except ConfigurationError as exc:
            raise ConfigurationError(f"{where}: {exc}") from None
        factory = _adapter(table.get("adapter", "sqlite:streams.db"), where, data_dir, table)
        providers[str(name)] = PersistentStreamProvider(factory, opts)
    return providers
