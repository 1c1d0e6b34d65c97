"""RequestContext: small values a caller sets that travel with its calls.

A caller sets values for a block (``with RequestContext.set(tenant="a"):``); every grain
call made inside it, and every call those grains make in turn, carries them: to local
activations, to other silos and from a client through its gateway, in the request frame.
A grain reads them with ``RequestContext.get("tenant")``. A timer runs with the context
that was current when it was registered; a stream event carries its publisher's context to
each consumer's handler (``messaging.context_event``). A turn sees only its own request's
values: what one turn sets is gone when the next turn starts.

The carrier is one ``contextvars.ContextVar`` holding a dict never changed once set (or None when
empty, so a call without context pays nothing and sends nothing). Values must be msgpack
scalars (str, int, float, bool, None, bytes) under str keys, and the whole mapping must
encode to at most ``MAX_BYTES``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import Context, ContextVar, copy_context
from typing import Any, Final

import msgpack

from orleanspy.messaging.context_event import MAX_CONTEXT_BYTES, ContextEvent

__all__ = ["MAX_BYTES", "RequestContext", "check_context", "request_context", "unwrap_events",
           "without_context"]

#: The largest encoded size of a request context, in bytes.
MAX_BYTES: Final = MAX_CONTEXT_BYTES

_SCALARS: Final = (str, int, float, bool, bytes, type(None))
_PLAIN: Final = frozenset(_SCALARS)


def _plain(value: Any) -> Any:
    """A subclass's value (an IntEnum, a str enum) as its plain scalar, without its
    ``__str__`` (``check_context`` admitted it)."""
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bytes):
        return bytes(value)
    return value

#: The current request context (a dict never changed once set: ``set`` makes a new one), or
#: None when empty.
request_context: ContextVar[dict[str, Any] | None] = ContextVar(
    "orleanspy_request_context", default=None
)

get_context: Final = request_context.get
set_context: Final = request_context.set


def check_context(values: Mapping[str, Any]) -> None:
    """Raise ValueError unless ``values`` may travel as a request context."""
    for key, value in values.items():
        if type(key) is not str:
            raise ValueError(f"request context key {key!r} must be a str")
        if not isinstance(value, _SCALARS):
            raise ValueError(
                f"request context value {key}={value!r} must be str, int, float, bool, None "
                "or bytes (encode anything richer yourself, e.g. as a str)"
            )
    try:
        size = len(msgpack.packb(dict(values), use_bin_type=True))
    except (OverflowError, ValueError) as exc:
        raise ValueError(f"request context cannot be encoded: {exc}") from exc
    if size > MAX_BYTES:
        raise ValueError(
            f"request context encodes to {size} bytes, over the {MAX_BYTES}-byte limit: "
            "carry an id and look the data up instead"
        )


class RequestContext:
    """Values that travel with the calls made in a block (see the module's doc)."""

    __slots__ = ()

    @staticmethod
    @contextmanager
    def set(**values: Any) -> Iterator[None]:
        """Within the block, calls carry the current values updated with ``values``.

        Raises:
            ValueError: a value is not a msgpack scalar, or the context is over ``MAX_BYTES``.
        """
        current = get_context()
        merged = dict(current) if current else {}
        merged.update(values)
        check_context(merged)
        for key, value in values.items():  # plain scalars: what travels is what is read
            kind = type(value)
            if kind not in _PLAIN:
                merged[key] = _plain(value)
        token = set_context(merged or None)
        try:
            yield
        finally:
            request_context.reset(token)

    @staticmethod
    def get(key: str, default: Any = None) -> Any:
        """The value of ``key`` in the current request context, or ``default``."""
        current = get_context()
        if current is None:
            return default
        return current.get(key, default)

    @staticmethod
    def snapshot() -> dict[str, Any]:
        """A copy of the current request context (empty when none is set)."""
        current = get_context()
        return dict(current) if current else {}


def without_context() -> Context | None:
    """For a background task started here (``create_task(..., context=...)``): a copy of
    the current context without its request context, or None when there is none (the task
    copies the current context then, at no extra cost). A task that outlives the call that
    started it (a stream's delivery loop, say) must not run under that call's values."""
    if get_context() is None:
        return None
    context = copy_context()
    context.run(set_context, None)
    return context


def unwrap_events(events: list[tuple[Any, Any]]) -> tuple[list[tuple[Any, Any]],
                                                         dict[str, Any] | None]:
    """Stream events as a batch handler takes them: each item unwrapped from its
    ``ContextEvent``, and the context of the first that carries one (None: none does)."""
    context = None
    out = []
    for item, token in events:
        if type(item) is ContextEvent:
            if context is None:
                context = item.context
            item = item.item
        out.append((item, token))
    return out, context
