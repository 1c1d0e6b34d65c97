"""Grains of the client-surface attack test (``--app tests.integration.surface_app``): every
kind of method the runtime calls on a grain (an implicit consumer's callbacks, an explicit
subscription's handler, a Parquet sink's commit path, a reminder tick) next to plain methods
that clients call. ``Surface.methods`` lists what the silo registers, so the test enumerates
the silo's own table, not a list of its own."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from orleanspy import Grain, implicit_subscription, stream_handler
from orleanspy.spark.options import ParquetSinkOptions
from orleanspy.spark.sink import ParquetSink
from orleanspy.streams.tokens import SequenceToken

__all__ = ["Explicit", "Lake", "NumberSink", "Surface", "Ticker"]


def _append(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)


async def record(grain: Grain, line: str) -> None:
    path = os.path.join(grain.silo.options.data_dir, "received.txt")
    await asyncio.to_thread(_append, path, line)


@implicit_subscription("numbers")
class NumberSink(Grain):
    async def on_next(self, item: Any, token: SequenceToken) -> None:
        await record(self, f"implicit {self.key} {item}\n")

    async def on_error(self, error: BaseException) -> None:
        await record(self, f"error {self.key} {error}\n")

    async def on_completed(self) -> None:
        await record(self, f"completed {self.key}\n")

    async def total(self) -> int:
        return 0


class Explicit(Grain):
    async def watch(self, key: str) -> None:
        stream = self.get_stream_provider("s").get_stream("readings", key)
        await stream.subscribe(self.on_reading)

    @stream_handler
    async def on_reading(self, item: Any, token: SequenceToken) -> None:
        await record(self, f"explicit {self.key} {item}\n")


@implicit_subscription("lake")
class Lake(ParquetSink):
    sink_options = ParquetSinkOptions(path="lake")

    async def on_commit(self, files: list[str], events: int) -> None:
        await record(self, f"lake {self.key} {events}\n")


class Ticker(Grain):
    async def receive_reminder(self, name: str, status: Any) -> None:
        await record(self, f"tick {name}\n")


class Surface(Grain):
    async def methods(self) -> list[list[Any]]:
        """Every (type, method, open to clients) the silo registers."""
        return [[type_name, name, method.client_ok]
                for type_name, info in self.silo.registry.items()
                for name, method in info.methods.items()]

    async def live(self) -> list[list[Any]]:
        """Every live activation's (type, key): where system targets answer."""
        return [[act.grain_id.type_name, act.grain_id.key]
                for act in list(self.silo.catalog.activations.values())]
