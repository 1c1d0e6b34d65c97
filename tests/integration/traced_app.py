"""Grains of the tracing integration test (``--app tests.integration.traced_app``), and the
OpenTelemetry set-up every process of it uses: importing this module sets a tracer provider
that writes each ended span as a JSON line to ``spans-<pid>.jsonl`` in the silo's data dir
(``--data-dir`` of the command line), or in ``ORLEANSPY_TEST_SPANS`` for the client.

Front (called by the client) calls Back on another silo; Back publishes to the "orders"
stream; Shipper, its implicit consumer, records each item."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from orleanspy import Grain, implicit_subscription, placement

__all__ = ["Back", "Front", "Shipper", "install"]


class FileExporter(SpanExporter):
    """Each span as a JSON line: trace, span and parent ids, name, kind, pid."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self.path.open("a", encoding="utf-8") as out:
            for span in spans:
                ctx = span.get_span_context()
                assert ctx is not None
                out.write(json.dumps({
                    "trace": format(ctx.trace_id, "032x"), "span": format(ctx.span_id, "016x"),
                    "parent": format(span.parent.span_id, "016x") if span.parent else None,
                    "name": span.name, "kind": span.kind.name.lower(), "pid": os.getpid(),
                }) + "\n")
        return SpanExportResult.SUCCESS


def install(folder: Path) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter(
        folder / f"spans-{os.getpid()}.jsonl")))
    trace.set_tracer_provider(provider)


def _data_dir() -> Path | None:
    argv = sys.argv
    if "--data-dir" in argv:
        return Path(argv[argv.index("--data-dir") + 1])
    return None


_folder = os.environ.get("ORLEANSPY_TEST_SPANS") or _data_dir()
if _folder is not None:
    install(Path(_folder))


@placement("hash_based")
class Front(Grain):
    async def where(self) -> str:
        return self.silo.name

    async def order(self, item: str, back: str) -> str:
        where: str = await self.get_grain(Back, back).ship(item)
        return where


@placement("hash_based")
class Back(Grain):
    async def where(self) -> str:
        return self.silo.name

    async def ship(self, item: str) -> str:
        await self.get_stream_provider("s").get_stream("orders", item).on_next(item)
        return self.silo.name


@implicit_subscription("orders")
class Shipper(Grain):
    async def on_activate(self) -> None:
        self.items: list[Any] = []

    async def on_next(self, item: Any, token: Any) -> None:
        self.items.append(item)

    async def seen(self) -> list[Any]:
        return self.items
