"""Effectively-once stream consumers: a grain's state sees each event of its streams once.

``@effectively_once`` (opt-in, on a grain class with a persistent state) keeps, in that
state's stored record, the token of the last event the grain handled per subscription (a
small map ``"namespace/subscription id" -> (sequence, index)`` beside the value). The map
is written by the state's own writes — the same etag-checked write, no second round trip —
so a stored value and the tokens stored with it always agree: the value reflects exactly the
events up to those tokens. A redelivery (after a crash, a failed acknowledgement, a hand-off)
of an event at or before its subscription's stored token is dropped before the handler runs;
a batch delivery loses its handled prefix and the rest is delivered.

Grains that do not opt in keep ``Grain.__orleanspy_stream_deliver__`` unchanged: the check
costs them nothing. What is covered and what is not: docs/streams.md, "Effectively-once
consumers".
"""

from __future__ import annotations

from typing import Any, TypeVar

from orleanspy.errors import ConfigurationError, StreamDeliveryInterrupted, StreamError
from orleanspy.grains.grain import (
    Grain,
    deliver_batch,
    handle_event,
    removed_subscription,
    stale_delivery,
)
from orleanspy.grains.state import PersistentState, StateSpec

__all__ = ["effectively_once", "handled_prefix"]

G = TypeVar("G", bound=type)

#: the class attribute naming the state that keeps the tokens of an effectively-once grain
STATE_ATTR = "_orleanspy_effectively_once_state"


def handled_prefix(events: list[Any], last: tuple[int, int]) -> int:
    """How many of ``events`` (``(item, token)`` in token order) are at or before ``last``
    (a stored ``(sequence, index)``): the prefix a redelivery drops."""
    sequence, index = last
    n = 0
    for _, token in events:
        s = token.sequence
        if s > sequence or (s == sequence and token.index > index):
            break
        n += 1
    return n


def effectively_once(cls: G | None = None, *, state: str | None = None) -> Any:
    """Class decorator: the grain's persistent state ``state`` (the only one it declares, if
    not named) reflects every event of its stream subscriptions exactly once, across
    crashes and redeliveries.

    The runtime records each event's token in that state before the handler runs and stores
    it with the state's next ``write()``; an event at or before the stored token of its
    subscription is dropped before the handler runs. Example::

        @effectively_once
        @implicit_subscription("orders")
        class Totals(Grain):
            state = persistent_state(TotalsState)

            async def on_next(self, order, token):
                self.state.value.total += order.amount
                await self.state.write()

    Raises:
        ConfigurationError: the class is no ``Grain``, declares no persistent state, declares
            several and ``state`` names none of them, or defines its own
            ``__orleanspy_stream_deliver__``.
    """

    def deco(klass: G) -> G:
        if not issubclass(klass, Grain):
            raise ConfigurationError(
                f"@effectively_once applies to a Grain subclass, not {klass.__name__}")
        specs = {name: value for base in reversed(klass.__mro__)
                 for name, value in vars(base).items() if isinstance(value, StateSpec)}
        if state is None and len(specs) != 1:
            raise ConfigurationError(
                f"@effectively_once on {klass.__name__}: the grain declares "
                f"{len(specs)} persistent states ({sorted(specs) or 'none'}); declare one with "
                "persistent_state(...) or name the one that keeps the tokens: "
                "@effectively_once(state='attr')")
        attr = state if state is not None else next(iter(specs))
        spec = specs.get(attr)
        if spec is None:
            raise ConfigurationError(
                f"@effectively_once(state={attr!r}) on {klass.__name__}: no persistent state "
                f"of that name (declared: {sorted(specs) or 'none'})")
        if "__orleanspy_stream_deliver__" in vars(klass):
            raise ConfigurationError(
                f"@effectively_once on {klass.__name__}: the class defines its own "
                "__orleanspy_stream_deliver__")
        if attr not in vars(klass):  # declared by a base: mark a copy, leave the base as is
            spec = StateSpec(spec.factory, spec.name, spec.storage, spec.write_on_deactivate)
            setattr(klass, attr, spec)
            spec.__set_name__(klass, attr)
        spec.stream_tokens = True
        setattr(klass, STATE_ATTR, attr)
        klass.__orleanspy_stream_deliver__ = _deliver  # type: ignore[method-assign]
        return klass

    return deco if cls is None else deco(cls)


def _handlers(grain: Any, sub_id: str, namespace: str, key: Any) -> tuple[Any, Any]:
    """(on_next, on_next_batch) of subscription ``sub_id``: one of them is None."""
    handlers = grain.__dict__.get("_orleanspy_stream_handlers")
    observer = handlers.get(sub_id) if handlers else None
    if observer is not None:
        return observer.on_next, observer.on_next_batch
    if sub_id.startswith("implicit:"):
        if hasattr(grain, "on_next_batch"):
            return None, grain.on_next_batch
        if hasattr(grain, "on_next"):
            return grain.on_next, None
    if removed_subscription(grain, sub_id):
        return None, None  # unsubscribed while this delivery was on its way: dropped
    raise StreamError(
        f"{grain.grain_id} has no handler for subscription {sub_id} on stream "
        f"{namespace}/{key}: after a reactivation, resume it in on_activate "
        "(stream.get_subscriptions() then handle.resume(handler))"
    )


async def _deliver(
    self: Any, sub_id: str, namespace: str, key: Any, events: list[Any],
    handshake: str | None = None,
) -> Any:
    """``Grain.__orleanspy_stream_deliver__`` of an effectively-once grain: the resume
    handshake as there, then the handled prefix is dropped and each event's token is set in
    the state before its handler runs (so that a write by the handler stores it). A handler
    that raises leaves the previous token, unless it wrote the state before raising: the
    stored record then claims the event, which counts as handled (its retry is dropped)."""
    stale = stale_delivery(self, sub_id, handshake)
    if stale is not None:
        return stale
    ps: PersistentState[Any] = self.__dict__["_orleanspy_states"][getattr(self, STATE_ATTR)]
    tokens = ps.stream_tokens
    assert tokens is not None  # the spec was marked by @effectively_once
    # an implicit subscription's id names the grain class, not the stream: the namespace
    # tells the streams of a class that subscribes to several apart
    entry = f"{namespace}/{sub_id}"
    last = tokens.get(entry)
    n = 0
    if last is not None:
        n = handled_prefix(events, last)
        if n:
            self._orleanspy_activation.silo.log.info(
                "stream_redelivery_dropped", grain=str(self.grain_id), subscription=sub_id,
                events=n, up_to=f"{last[0]}.{last[1]}")
            if n == len(events):
                return None
            events = events[n:]
    on_next, on_next_batch = _handlers(self, sub_id, namespace, key)
    if on_next is None and on_next_batch is None:
        return None
    if on_next_batch is not None:
        end = events[-1][1]
        tokens[entry] = (end.sequence, end.index)
        etag = ps.etag
        try:
            await deliver_batch(on_next_batch, events)
        except BaseException:
            if ps.etag == etag:  # not stored: the batch is not handled
                _restore(ps, entry, last)
            raise
        return None
    for done, (item, token) in enumerate(events):
        tokens[entry] = (token.sequence, token.index)
        etag = ps.etag
        try:
            await handle_event(on_next, item, token)
        except BaseException as exc:
            if ps.etag == etag:  # not stored: the event is not handled
                _restore(ps, entry, last)
            if n + done == 0 or not isinstance(exc, Exception):
                raise
            # The events before it were handled (or dropped): the agent retries from this one.
            raise StreamDeliveryInterrupted(
                n + done, f"on_next failed at token {token}: {exc!r}") from exc
        last = tokens[entry]
    return None


def _restore(ps: PersistentState[Any], entry: str, last: tuple[int, int] | None) -> None:
    tokens = ps.stream_tokens
    assert tokens is not None
    if last is None:
        tokens.pop(entry, None)
    else:
        tokens[entry] = last
