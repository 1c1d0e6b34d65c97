"""Dispatcher: turns calls into messages and hands them to activations (the call path).

Local requests try to run inline (no task, no future) and fall back to the mailbox. Values
that are not immutable scalars are copied through msgpack on the way in and out, so a grain
never shares a mutable object with its caller and an unserialisable argument fails at the
call site, exactly as it would across processes.
"""

from __future__ import annotations

import asyncio
import difflib
from collections.abc import Coroutine
from functools import partial
from types import GeneratorType
from typing import TYPE_CHECKING, Any, Protocol

from orleanspy._util.clock import Clock
from orleanspy._util.eager import CARRY_CODE
from orleanspy._util.futures import reply_to
from orleanspy.diagnostics import RequestDropped
from orleanspy.errors import (
    GrainCallTimeoutError,
    MessageRejectedError,
    ProtocolError,
    SiloUnavailableError,
)
from orleanspy.grains.context import current_turn, turn_chain
from orleanspy.grains.interface import GrainClassInfo, MethodInfo
from orleanspy.grains.request_context import get_context as _get_context
from orleanspy.ids import GrainId
from orleanspy.messaging.bodies import open_body
from orleanspy.messaging.codec import IMMUTABLE_TYPES, Codec, is_immutable
from orleanspy.messaging.deadlines import Deadlines
from orleanspy.messaging.message import (
    FLAG_CANCELLABLE,
    FLAG_CANCELLED,
    FLAG_FROM_CLIENT,
    FLAG_SELF_CALL,
    LONG_AGO,
    Direction,
    Message,
)
from orleanspy.runtime.activation import NOT_NOW, Activation
from orleanspy.runtime.call_filters import CallFilter, CallFilters, GrainCall
from orleanspy.runtime.catalog import Catalog
from orleanspy.runtime.host import SiloHost
from orleanspy.runtime.locator import GrainLocator, RequestForwarder

if TYPE_CHECKING:
    from orleanspy._util.carrier import Carrier

__all__ = ["Dispatcher"]


_REQUEST = Direction.REQUEST
_ONE_WAY = Direction.ONE_WAY
_Future = asyncio.Future  # exactly this type: a Task awaits it on its C fast path
_MIN_INT = -(2**63)
_MAX_INT = 2**64 - 1


def _drop_reason(exc: Exception) -> str:
    if isinstance(exc, SiloUnavailableError):
        return "shutting_down"
    if isinstance(exc, MessageRejectedError):
        return f"rejected: {exc.kind}"
    return f"failed: {type(exc).__name__}"


class _Call(Protocol):
    def __call__(self, grain_id: GrainId, method: str, args: tuple[Any, ...],
                 kwargs: dict[str, Any] | None, timeout: float | None,
                 owned: bool = False) -> Coroutine[Any, Any, Any]: ...


class Dispatcher:
    """Routes messages of one silo: in-process calls and requests from connections."""

    __slots__ = (
        "_activations", "_catalog", "_codec", "_deadlines", "_default_timeout",
        "_local_only", "_locator", "_monotonic", "_outgoing", "_waiting", "call", "silo",
    )

    def __init__(
        self, silo: SiloHost, catalog: Catalog, locator: GrainLocator, codec: Codec, *,
        clock: Clock, default_timeout: float,
    ) -> None:
        """``silo``: its name, status and logger for dropped requests (read on use);
        ``catalog``: where local activations are found or created; ``locator``: where the
        others are routed; ``codec``: copies values that a grain must not share with its
        caller; ``clock``: response deadlines; ``default_timeout``: a call's deadline when
        it names none (``SiloOptions.response_timeout``)."""
        self.silo = silo
        self._locator = locator
        self._local_only = locator.local_only
        self._monotonic = clock.monotonic
        self._catalog = catalog
        self._activations = catalog.activations
        self._codec = codec
        self._default_timeout = default_timeout
        #: local calls waiting for a reply, by message id, and their response deadlines
        #: (one timer for all of them)
        self._waiting: dict[int, asyncio.Future[Any] | Carrier] = {}
        self._deadlines = Deadlines(clock, "silo default")
        self._outgoing: tuple[CallFilter, ...] | None = None
        #: A call from this process (await the result): the arguments, the timeout (None:
        #: the default) and ``owned`` (the caller hands the arguments over, runtime
        #: components only, so they are not copied). A plain function returning the
        #: coroutine of the call: through the outgoing filters when there are any
        #: (``outgoing``), else straight to the local or the routed path.
        self.call: _Call = self._unfiltered_call

    @property
    def outgoing(self) -> tuple[CallFilter, ...] | None:
        """The silo's outgoing call filters (``runtime.call_filters``), or None: none, and no
        grain class filters its outgoing calls (calls then pay nothing for filters)."""
        return self._outgoing

    @outgoing.setter
    def outgoing(self, filters: tuple[CallFilter, ...] | None) -> None:
        self._outgoing = filters
        self.call = self._unfiltered_call if filters is None else self._filtered_call

    # -- values ---------------------------------------------------------------------------
    def copy_args(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """The arguments as the callee gets them: immutable scalars as they are, anything
        else (or an int msgpack cannot carry) through a msgpack round trip."""
        for a in args:
            if not is_immutable(a) or (type(a) is int and not _MIN_INT <= a <= _MAX_INT):
                codec = self._codec
                return tuple(codec.unpackb(codec.packb(list(args))))
        return args

    def copy_value(self, value: Any) -> Any:
        """``value`` as another grain gets it (see ``copy_args``)."""
        if is_immutable(value) and not (
            type(value) is int and not _MIN_INT <= value <= _MAX_INT
        ):
            return value
        codec = self._codec
        return codec.unpackb(codec.packb(value))

    def _locate(self, grain_id: GrainId, method: str, msg: Message) -> Activation:
        """Find or create the activation; seam for the directory and placement."""
        act = self._activations.get(grain_id)
        info = act.info if act is not None else self._catalog.info_for(grain_id)
        m = info.methods.get(method)
        if m is None or (msg.flags & FLAG_FROM_CLIENT and not m.client_ok):
            if m is not None:
                self.silo.log.warning("client_call_refused", grain=str(grain_id),
                                      method=method, reason="not callable from a client")
            raise _refusal(info, method, m)
        check = m.check
        if check is not None and msg.flags & FLAG_FROM_CLIENT:
            args, fast = msg.args, check.fast
            if not (fast is not None and not msg.kwargs and len(args) == len(fast)
                    and all(map(isinstance, args, fast))
                    and (check.no_bools or bool not in map(type, args))):
                problem = check(args, msg.kwargs)
                if problem is not None:
                    raise MessageRejectedError(problem, "bad_arguments")
        msg.flags |= m.flags
        return act if act is not None else self._catalog.get_or_create(grain_id)

    # -- local calls (references held inside this process) ---------------------------------
    def _unfiltered_call(self, grain_id: GrainId, method: str, args: tuple[Any, ...],
                         kwargs: dict[str, Any] | None, timeout: float | None,
                         owned: bool = False) -> Coroutine[Any, Any, Any]:
        """``call`` without outgoing filters: one coroutine per call."""
        act = self._activations.get(grain_id)
        if act is None and not self._local_only:
            return self._routed_call(grain_id, method, args, kwargs, timeout)
        return self._local_call(act, grain_id, method, args, kwargs, timeout, owned)

    def _filtered_call(self, grain_id: GrainId, method: str, args: tuple[Any, ...],
                       kwargs: dict[str, Any] | None, timeout: float | None,
                       owned: bool = False) -> Coroutine[Any, Any, Any]:
        """A call through the outgoing filters: the silo's, then the calling grain's."""
        chain = self.outgoing or ()
        turn = current_turn.get()
        grain = None
        if turn is not None:
            grain = turn.activation.grain
            own = CallFilters.grain_outgoing(grain)
            if own is not None:
                chain = (*chain, own)

        def invoke(call: GrainCall) -> Coroutine[Any, Any, Any]:
            return self._unfiltered_call(call.grain_id, call.method, tuple(call.args),
                                         call.kwargs, timeout, owned)

        return GrainCall(grain_id, method, args, kwargs, grain, chain, invoke).proceed()

    async def _local_call(
        self,
        act: Activation | None,
        grain_id: GrainId,
        method: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None,
        timeout: float | None,
        owned: bool,
    ) -> Any:
        if args and not owned:
            args = self.copy_args(args)
        if kwargs:
            kwargs = self.copy_value(kwargs)
        turn = current_turn.get()
        chain = () if turn is None else turn_chain(turn)
        msg = Message(_REQUEST, grain_id, method, args, kwargs, chain, 0, timeout)
        m = act.info.methods.get(method) if act is not None else None
        if m is not None and act is not None:
            msg.flags = m.flags
        else:
            act = self._locate(grain_id, method, msg)
        result = act._start(msg, True)  # runs now in this frame, or NOT_NOW
        if result is NOT_NOW:
            # It starts later, from another context: it carries its request context (a turn
            # started here runs in a copy of this context, which holds it).
            msg.rc = _get_context()
            fut: asyncio.Future[Any] = _Future(loop=self.silo.loop)
            msg.reply = partial(reply_to, fut)
            msg.deadline = self._monotonic() + (timeout or self._default_timeout)
            act.enqueue(msg)
            result = fut
        kind = type(result)
        if kind is GeneratorType and result.gi_code is CARRY_CODE:
            # The turn goes on in this task; its deadline is watched once it waits for a
            # future or yields twice (``watch``): a turn done by then never pays for it.
            if turn is not None and turn.flags & FLAG_CANCELLABLE:
                result = await _carried(turn, msg, result)
            else:
                result = await result
        elif kind is _Future and msg.reply is not None:  # (a returned value has no reply)
            if not result.done():
                result = await self._wait(result, msg, timeout or self._default_timeout)
            else:
                result = result.result()
        kind = type(result)
        if kind in IMMUTABLE_TYPES and (kind is not int or _MIN_INT <= result <= _MAX_INT):
            return result
        return self.copy_value(result)

    def watch(self, msg: Message, carrier: Carrier) -> None:
        """Give ``carrier`` (a local call's turn that its caller carries) the caller's
        response deadline: past it, the caller gets ``GrainCallTimeoutError`` and the turn
        goes on by itself."""
        key = msg.id
        if not msg.deadline:  # the turn reads it (a Spark job ends with its call)
            msg.deadline = self._monotonic() + (msg.timeout or self._default_timeout)
        self._waiting[key] = carrier
        self._deadlines.add(msg.timeout or self._default_timeout, key, msg.target, msg.method,
                            self._waiting)

    def unwatch(self, msg: Message) -> None:
        """The turn of ``msg`` ended, or its caller gave up on it: no deadline to watch."""
        self._waiting.pop(msg.id, None)

    async def _routed_call(
        self,
        grain_id: GrainId,
        method: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None,
        timeout: float | None,
    ) -> Any:
        """A call to a grain not active here: the locator routes it (possibly back here)."""
        turn = current_turn.get()
        chain = () if turn is None else turn_chain(turn)
        t = timeout or self._default_timeout
        msg = Message(_REQUEST, grain_id, method, args, kwargs, chain, 0, t)
        msg.rc = _get_context()
        msg.deadline = self._monotonic() + t
        fut: asyncio.Future[Any] = _Future(loop=self.silo.loop)
        msg.reply = partial(reply_to, fut)
        self._locator.route(msg, local_origin=True)
        if fut.done():
            return fut.result()
        return await self._wait(fut, msg, t)

    async def _wait(self, fut: asyncio.Future[Any], msg: Message, timeout: float) -> Any:
        """The outcome of a call that waits for its reply: ``fut``, failed with
        ``GrainCallTimeoutError`` past ``timeout`` (``Deadlines``). A caller that gives up
        (cancelled, or past its deadline) cancels the request (``cancel``)."""
        waiting = self._waiting
        key = msg.id
        waiting[key] = fut
        self._deadlines.add(timeout, key, msg.target, msg.method, waiting)
        try:
            return await fut
        except (asyncio.CancelledError, GrainCallTimeoutError):
            if fut.cancelled() or key not in waiting:  # not answered: it gave up
                self.cancel(msg)
            raise
        finally:
            waiting.pop(key, None)

    def cancel(self, msg: Message) -> None:
        """The caller of ``msg`` gave up on it: sent on to another silo, the cancel follows
        it there; not started, it never starts (dropped when it would); running a
        ``@cancellable`` method, its turn is cancelled (``Turns.cancel_request``)."""
        forward = getattr(msg, "forward", None)
        if forward is not None:
            forward[0].send_cancel(forward[1])
            return
        activation = getattr(msg, "activation", None)
        if activation is not None:
            activation.cancel_request(msg)
        else:
            msg.flags |= FLAG_CANCELLED
            msg.deadline = LONG_AGO

    async def send_one_way(
        self,
        grain_id: GrainId,
        method: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None,
    ) -> None:
        if args:
            args = self.copy_args(args)
        if kwargs:
            kwargs = self.copy_value(kwargs)
        # The sender does not wait for a one-way call: its chain must not make the receiver's
        # calls back look like a cycle. Only "to myself" is kept (never held back).
        msg = Message(_ONE_WAY, grain_id, method, args, kwargs, ())
        msg.rc = _get_context()
        turn = current_turn.get()
        if turn is not None and turn.activation.grain_id == grain_id:
            msg.flags |= FLAG_SELF_CALL
        if not self._local_only and grain_id not in self._activations:
            self._locator.route(msg)
            return
        act = self._locate(grain_id, method, msg)
        room = act.enqueue(msg, wait=True)
        if room is not None:
            await room

    # -- messages from connections and re-routing -------------------------------------------
    def deliver(self, msg: Message) -> None:
        """Hand a decoded message (from a client connection) to its activation, wherever it
        lives in the cluster; errors go to reply."""
        if not self._local_only and msg.target not in self._activations:
            self._locator.route(msg)
            return
        self.deliver_here(msg)

    @property
    def local_only(self) -> bool:
        """Every grain lives on this silo (a lone silo): nothing is routed elsewhere."""
        return self._local_only

    def connection_for(self, grain_id: GrainId) -> RequestForwarder | None:
        """The connection to send a gateway client's request for ``grain_id`` on as it came:
        the grain is not active here and routing would send it to another silo at once
        (``GrainLocator.connection_for``). None: deliver it as a message."""
        if self._local_only or grain_id in self._activations:
            return None
        return self._locator.connection_for(grain_id)

    def deliver_here(self, msg: Message) -> None:
        """Hand a message to its activation on this silo (created if need be)."""
        try:
            if self.silo.stopping and msg.target not in self._activations:
                # A stopping silo serves the grains it still hosts; the others go on to their
                # activation elsewhere (a lone silo has none to offer: refused there).
                if self._local_only:
                    raise SiloUnavailableError(f"silo {self.silo.name} is shutting down")
                self._locator.route(msg, forwarded=True)
                return
            if msg.body is not None:  # from a connection: its arguments are decoded here
                open_body(self._codec, msg)
            act = self._locate(msg.target, msg.method, msg)
            act.enqueue(msg)
        except Exception as exc:
            if type(exc) is ProtocolError:  # a body beyond the decode bound: its client goes
                sender = getattr(msg, "sender", None)
                if sender is not None:
                    sender.bad_frame(str(exc))
            diag = self.silo.diagnostics
            if diag.listening:
                diag.emit(RequestDropped(
                    silo=self.silo.name, grain_id=msg.target, method=msg.method,
                    reason=_drop_reason(exc),
                ))
            if msg.reply is not None:
                msg.reply(False, exc)
            else:
                self.silo.log.warning(
                    "one_way_call_failed", grain=str(msg.target), method=msg.method,
                    error=repr(exc),
                )

    def redispatch(self, msg: Message) -> None:
        """Send a message queued on a deactivated activation to the next activation."""
        self._locator.route(msg, forwarded=True)


async def _carried(turn: Message, msg: Message, runner: Any) -> Any:
    """Carry the turn of ``msg`` for ``turn``, a ``@cancellable`` turn: while it does, a
    cancel of ``turn`` gives up this call (``Turns.cancel_request``)."""
    turn.carrying = msg
    try:
        return await runner
    finally:
        turn.carrying = None


def _refusal(info: GrainClassInfo, method: str, m: MethodInfo | None) -> MessageRejectedError:
    """The error for a request naming no method, or one a gateway client may not call."""
    public = ", ".join(info.public_methods) or "none"
    if m is None:
        close = difflib.get_close_matches(method, info.public_methods, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return MessageRejectedError(
            f"grain type {info.type_name!r} has no method {method!r} "
            f"({hint}public async methods: {public})",
            "unknown_method",
        )
    if m.runtime:
        why = f"{method!r} is a runtime hook that only the runtime calls"
    else:
        why = f"grain type {info.type_name!r} belongs to the runtime"
    return MessageRejectedError(
        f"{info.type_name}.{method} is not callable from a client: {why}", "not_callable"
    )
