"""OpenTelemetry traces: spans for grain calls, stream deliveries and Spark jobs.

Optional (``pip install 'orleanspy[otel]'``: ``opentelemetry-api``; the application brings
the SDK and an exporter). Tracing is on when the process has a tracer provider set
(``opentelemetry.trace.set_tracer_provider``) before its silo or client is created, and
costs nothing otherwise: no filter is registered and no span is made.

A call's span context travels in the request context (``grains.request_context``) as W3C
trace context (``traceparent``, ``tracestate``), so spans connect from a client through its
gateway silo to a grain on another silo, and from a stream publish to the consumer that
handles the event. This module holds what every layer needs (no orleanspy import):
``tracer()``, ``start_span`` and ``carrier_of``; the runtime's filters
(``runtime.tracing_filters``) and the client make the call spans.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = ["TRACE_KEYS", "carrier_of", "start_span", "tracer"]

#: the request context keys that carry a span context (W3C trace context)
TRACE_KEYS: Final = ("traceparent", "tracestate")
_NAME: Final = "orleanspy"


def tracer() -> Any | None:
    """The process's tracer for orleanspy spans, or None: opentelemetry is not installed,
    or no tracer provider is set (the API's default provider makes no spans)."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return None
    return provider.get_tracer(_NAME)


def start_span(tracer: Any, name: str, kind: str, carrier: Mapping[str, Any] | None,
               attributes: Mapping[str, Any] | None = None, *, follow: bool = False) -> Any:
    """A started span (end it with ``span.end()``, or use it with
    ``opentelemetry.trace.use_span(span, end_on_exit=True)``). Its parent: the current span
    of this task, or, if there is none (or ``follow``), the span context ``carrier`` holds
    (a request context; a stream event's is its publisher's). ``kind``: "client", "server",
    "producer", "consumer" or "internal"."""
    from opentelemetry import trace
    from opentelemetry.propagate import extract

    context = None
    if carrier and "traceparent" in carrier and (
            follow or trace.get_current_span() is trace.INVALID_SPAN):
        context = extract({k: str(carrier[k]) for k in TRACE_KEYS if k in carrier})
    return tracer.start_span(name, context=context, kind=getattr(trace.SpanKind, kind.upper()),
                             attributes=dict(attributes or {}))


def carrier_of(span: Any) -> dict[str, str]:
    """``span``'s context as W3C trace context values (for a request context)."""
    from opentelemetry import trace
    from opentelemetry.propagate import inject

    carrier: dict[str, str] = {}
    inject(carrier, context=trace.set_span_in_context(span))
    return {k: v for k, v in carrier.items() if k in TRACE_KEYS}
