"""Grains of the sink kill -9 test (hosted by a real silo process): a ParquetSink on the
``numbers`` namespace, landing under ``<data_dir>/lake``, on storage made a little slow (so
that a kill -9 finds deliveries in flight)."""

from __future__ import annotations

import asyncio

from orleanspy.spark import ParquetSink, ParquetSinkOptions
from orleanspy.streams import implicit_subscription


@implicit_subscription("numbers")
class NumberSink(ParquetSink):
    sink_options = ParquetSinkOptions(
        path="lake", timestamp_field="ts", columns={"k": "int64", "n": "int64", "ts": "int64"},
    )

    async def on_commit(self, files: list[str], events: int) -> None:
        await asyncio.sleep(0.05)
