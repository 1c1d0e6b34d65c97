"""The call filters that make a silo's OpenTelemetry spans (``orleanspy.tracing``).

Installed by the silo when the process has a tracer provider: an incoming filter makes a
SERVER span per grain call (its parent: the caller's span, from the request context) and
runs the method with it current; an outgoing filter makes a CLIENT span per call made
here and passes its context on in the request context, where the callee, and the events
the callee publishes, find it. Runtime hooks (stream delivery, reminder ticks) get no call
span: a delivered event gets its own (``grains.grain.with_context``).
"""

from __future__ import annotations

from typing import Any

from orleanspy.grains.interface import RUNTIME_HOOKS, RUNTIME_TYPE_PREFIX
from orleanspy.grains.request_context import request_context, set_context
from orleanspy.ids import GrainId
from orleanspy.runtime.call_filters import GrainCall
from orleanspy.tracing import carrier_of, start_span

__all__ = ["TracingFilters", "call_span", "traced"]


async def traced(tracer: Any, span: Any, work: Any) -> Any:
    """Await ``work`` with ``span`` current and its context in the request context; end the
    span with the outcome."""
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode

    context = dict(request_context.get() or {})
    context.update(carrier_of(span))
    token = set_context(context)
    try:
        with trace.use_span(span, end_on_exit=False, record_exception=False):
            return await work
    except BaseException as exc:
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        raise
    finally:
        request_context.reset(token)
        span.end()


class TracingFilters:
    """``incoming`` and ``outgoing`` silo filters for ``tracer``."""

    def __init__(self, tracer: Any, silo: str) -> None:
        self.tracer = tracer
        self.silo = silo

    async def incoming(self, call: GrainCall) -> Any:
        span = call_span(self.tracer, "server", call.grain_id, call.method, call.context,
                         self.silo)
        return await traced(self.tracer, span, call.proceed())

    async def outgoing(self, call: GrainCall) -> Any:
        grain_id = call.grain_id
        if grain_id.type_name.startswith(RUNTIME_TYPE_PREFIX) or call.method in RUNTIME_HOOKS:
            return await call.proceed()  # the runtime's own calls: no span
        span = call_span(self.tracer, "client", grain_id, call.method, call.context, self.silo)
        return await traced(self.tracer, span, call.proceed())


def call_span(tracer: Any, kind: str, grain_id: GrainId, method: str,
              context: dict[str, Any] | None, silo: str | None = None) -> Any:
    """A started span of one grain call (``kind`` "client" or "server"), named
    ``Type.method``, its parent found through ``context`` (``orleanspy.tracing.start_span``)."""
    attributes = {"rpc.system": "orleanspy", "rpc.service": grain_id.type_name,
                  "rpc.method": method, "orleanspy.grain": str(grain_id)}
    if silo is not None:
        attributes["orleanspy.silo"] = silo
    return start_span(tracer, f"{grain_id.type_name}.{method}", kind, context, attributes)
