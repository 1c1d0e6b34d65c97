"""Queue adapters (2): the contract and the memory, generator, SQLite, Redis and PostgreSQL
implementations.

The NATS JetStream adapter is imported from its own module,
``orleanspy.streams.adapters.nats`` (``NatsAdapterFactory``): it needs the optional
``nats-py`` client (the ``nats`` extra), which importing this package does not.

Data path: producer (1) -> ``QueueAdapter.enqueue`` -> queue -> ``QueueAdapterReceiver``
-> pulling agent (3). See ``base`` for the guarantees every adapter keeps.
"""

from __future__ import annotations

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
