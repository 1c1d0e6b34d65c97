"""Queue adapters (2): the contract and the memory, generator, SQLite, Redis and PostgreSQL
implementations.

The NATS JetStream adapter is imported from its own module,
``orleanspy.streams.adapters.nats`` (``NatsAdapterFactory``): it needs the optional
``nats-py`` client (the ``nats`` extra), which importing this package does not.

Data path: producer (1) -> ``QueueAdapter.enqueue`` -> queue -> ``QueueAdapterReceiver``
-> pulling agent (3). See ``base`` for the guarantees every adapter keeps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orleanspy._util.lazy import lazy_exports

if TYPE_CHECKING:
    from orleanspy.streams.adapters.base import (
        BatchContainer,
        QueueAdapter,
        QueueAdapterFactory,
        QueueAdapterReceiver,
        QueueFullError,
    )
    from orleanspy.streams.adapters.generator import GeneratorAdapterFactory, GeneratorOptions
    from orleanspy.streams.adapters.memory import MemoryAdapterFactory
    from orleanspy.streams.adapters.postgres import PostgresAdapterFactory
    from orleanspy.streams.adapters.redis import RedisAdapterFactory
    from orleanspy.streams.adapters.sqlite import SqliteAdapterFactory

#: each exported name and the module it is imported from on first use
_EXPORTS = {
    "BatchContainer": "orleanspy.streams.adapters.base",
    "GeneratorAdapterFactory": "orleanspy.streams.adapters.generator",
    "GeneratorOptions": "orleanspy.streams.adapters.generator",
    "MemoryAdapterFactory": "orleanspy.streams.adapters.memory",
    "PostgresAdapterFactory": "orleanspy.streams.adapters.postgres",
    "QueueAdapter": "orleanspy.streams.adapters.base",
    "QueueAdapterFactory": "orleanspy.streams.adapters.base",
    "QueueAdapterReceiver": "orleanspy.streams.adapters.base",
    "QueueFullError": "orleanspy.streams.adapters.base",
    "RedisAdapterFactory": "orleanspy.streams.adapters.redis",
    "SqliteAdapterFactory": "orleanspy.streams.adapters.sqlite",
}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

__all__ = [
    "BatchContainer",
    "GeneratorAdapterFactory",
    "GeneratorOptions",
    "MemoryAdapterFactory",
    "PostgresAdapterFactory",
    "QueueAdapter",
    "QueueAdapterFactory",
    "QueueAdapterReceiver",
    "QueueFullError",
    "RedisAdapterFactory",
    "SqliteAdapterFactory",
]
