"""Streamed responses, the callee's side: a grain method that is an async generator.

A call to such a method runs a turn that opens the generator and answers with its first
items: ``{"id": token, "items": [...], "done": bool}``. When the generator has more, it stays
open among the activation's streamed responses under ``token`` (128 random bits: knowing it
is what lets a caller pull), and the caller pulls the next items with
``__orleanspy_stream_pull__(token, count)`` (answered ``{"items", "done"}``) until ``done``,
or gives up with ``__orleanspy_stream_close__(token)``. Both run as ``@always_interleave``
turns of the same activation, one pull at a time: the generator only runs inside a pull, so
the producer never gets more than ``count`` items ahead of its caller (flow control by
pulling).

While the iteration is open the activation is **held**: a stand-in request stays among its
running requests, so other requests wait as they would for a turn that is still running
(not for a method marked ``@always_interleave`` or a ``@reentrant`` class, which interleave
as ever). The hold ends when the generator is exhausted or fails, when the caller closes
it, when nobody pulls for ``idle_timeout`` (the call's timeout, at most ``IDLE_BOUND`` times
the silo's ``response_timeout``), and when the activation deactivates. A pull whose caller
gives up (cancelled, or past its deadline) closes the iteration too.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncGenerator, Awaitable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from orleanspy.errors import MessageRejectedError
from orleanspy.messaging.message import FLAG_ALWAYS_INTERLEAVE, Direction, Message

__all__ = ["FIRST_BATCH", "MAX_BATCH", "close_all", "close_streamed", "open_streamed",
           "pull_streamed"]

#: items the opening call answers with
FIRST_BATCH: Final = 64
#: the most items one pull may ask for
MAX_BATCH: Final = 4096
#: an open iteration nobody pulls ends after its call's timeout, at most this many times the
#: silo's ``response_timeout``
IDLE_BOUND: Final = 10
_NONE: Final[Mapping[str, Any]] = MappingProxyType({})  # an activation without any


@dataclass(eq=False)
class _Open:
    """One open iteration."""

    token: str
    activation: Any
    agen: AsyncGenerator[Any, None]
    method: str
    idle_timeout: float
    hold: Message | None
    busy: bool = False
    #: what the generator raised after the items of the last answer (the next pull's)
    error: Exception | None = None
    #: ``aclose`` of the generator is under way or done
    closing: bool = False
    timer: Any = field(default=None, repr=False)


def _hold(activation: Any, method: str) -> Message:
    """A stand-in request among the activation's running ones, for the iteration's life."""
    hold = Message(Direction.ONE_WAY, activation.grain_id, method, (), None)
    hold.invoke = _never_invoked
    hold.activation = activation
    activation.running[hold.id] = hold
    if activation.blocking is None:
        activation.blocking = hold
    return hold


def _never_invoked() -> None:
    """The hold's ``invoke``: it is never started (set so that it counts as no call)."""


async def _take(agen: AsyncGenerator[Any, None], count: int
                ) -> tuple[list[Any], bool, Exception | None]:
    """Up to ``count`` items, whether the generator is done, and the error it raised after
    the items (raised at once when there are none: the items before an error are its
    caller's, the error comes with the next pull)."""
    items: list[Any] = []
    append = items.append
    anext = agen.__anext__
    try:
        while len(items) < count:
            append(await anext())
    except StopAsyncIteration:
        return items, True, None
    except Exception as exc:
        if not items:
            raise
        return items, False, exc
    return items, False, None


async def open_streamed(activation: Any, msg: Message, opening: Any) -> dict[str, Any]:
    """The turn of a call to an async generator method (``opening``: the generator, or an
    awaitable of it through the incoming call filters): its first items, and the token to
    pull the rest with."""
    agen = opening
    if isinstance(opening, Awaitable):
        agen = await opening
    if not isinstance(agen, AsyncGenerator):
        raise TypeError(f"{activation.name}.{msg.method} is an async generator method, but "
                        f"its call gave {type(agen).__name__}: an incoming call filter must "
                        "return what call.proceed() returns")
    items, done, error = await _take(agen, FIRST_BATCH)
    if done:
        return {"id": None, "items": items, "done": True}
    token = secrets.token_hex(16)
    interleaving = msg.flags & FLAG_ALWAYS_INTERLEAVE or activation.info.reentrant
    hold = None if interleaving else _hold(activation, msg.method)
    default = activation.silo.options.response_timeout
    # (bounded: a caller cannot hold the grain for longer than IDLE_BOUND default timeouts)
    timeout = min(msg.timeout or default, IDLE_BOUND * default)
    entry = _Open(token, activation, agen, msg.method, timeout, hold, error=error)
    if activation.streamed is None:
        activation.streamed = {}
    activation.streamed[token] = entry
    _arm(entry)
    return {"id": token, "items": items, "done": False}


def _arm(entry: _Open) -> None:
    if entry.timer is not None:
        entry.timer.cancel()
    entry.timer = entry.activation.silo.clock.call_later(entry.idle_timeout, _expire, entry)


def _expire(entry: _Open) -> None:
    if entry.busy:
        _arm(entry)  # a pull runs: it re-arms when it ends
        return
    entry.activation.silo.log.info(
        "streamed_call_expired", grain=entry.activation.name, method=entry.method,
        reason=f"nobody pulled for {entry.idle_timeout:g} s")
    _close(entry)


async def pull_streamed(activation: Any, token: str, count: int) -> dict[str, Any]:
    """The next ``count`` items (at most ``MAX_BATCH``) of iteration ``token``."""
    entry = (activation.streamed or _NONE).get(token)
    if entry is None:
        raise MessageRejectedError(
            f"no open streamed call {token[:8]}… on {activation.name}: it ended, expired "
            "(nobody pulled for the call's timeout) or was closed", "not_found")
    if entry.busy:
        raise MessageRejectedError(
            f"streamed call {token[:8]}… on {activation.name} is being pulled already: pull "
            "one batch at a time", "bad_arguments")
    if type(count) is not int or count < 1:
        raise MessageRejectedError(f"pull count {count!r} must be an int >= 1",
                                   "bad_arguments")
    entry.busy = True
    done = True
    try:
        error, entry.error = entry.error, None
        if error is not None:
            raise error
        items, done, entry.error = await _take(entry.agen, min(count, MAX_BATCH))
    finally:  # a failure, or a caller that gave up, ends the iteration
        entry.busy = False
        if done or token not in (activation.streamed or _NONE):  # (closed while it pulled)
            _close(entry)
        else:
            _arm(entry)
    return {"items": items, "done": done}


async def close_streamed(activation: Any, token: str) -> bool:
    """End iteration ``token`` of ``activation`` (its caller stopped early), once its
    generator has closed: True if it was open."""
    entry = (activation.streamed or _NONE).get(token)
    if entry is None:
        return False
    closing = _close(entry)
    if closing is not None:
        await asyncio.shield(closing)
    return True


def close_all(activation: Any) -> None:
    """End every open iteration of ``activation`` (it deactivates)."""
    if activation.streamed:
        for entry in list(activation.streamed.values()):
            _close(entry)


def _close(entry: _Open) -> asyncio.Future[None] | None:
    """End the iteration: forget it, release the hold, close the generator (once no pull
    runs it); the closing, if this call started it."""
    activation = entry.activation
    if activation.streamed:
        activation.streamed.pop(entry.token, None)
    if entry.timer is not None:
        entry.timer.cancel()
        entry.timer = None
    closing = None
    if not entry.busy and not entry.closing:
        entry.closing = True
        closing = asyncio.ensure_future(_aclose(entry))
        activation.silo.track(closing)
    hold = entry.hold
    if hold is not None:
        entry.hold = None
        if hold.id in activation.running:
            activation._finish(hold, None)
    return closing


async def _aclose(entry: _Open) -> None:
    try:
        await entry.agen.aclose()
    except Exception as exc:  # its finally blocks failed: the grain's error, logged
        entry.activation.silo.log_grain_error(
            "streamed_call_close_failed", grain=entry.activation.name, method=entry.method,
            error=repr(exc))
