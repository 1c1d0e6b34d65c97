"""Turns: how a turn of an activation starts, ends and is counted.

``Turns`` is a base of ``Activation`` (after ``Admission`` and ``Mailbox``: a slotted class
chain, so the turn path pays no extra attribute hop). ``Admission`` decides what may start,
``Mailbox`` holds what must wait; this module runs a turn and finishes it: the turn's
context, its first step (eager, ``_util.eager``), the three ways it ends (in its first
step, carried by its local caller to its end, or in a Task of its own), its reply and the
per-method statistics (``runtime.call_stats``). The activation's life (activate,
deactivate, timers) is ``runtime.activation``'s.

A turn starts *eagerly*: the grain method runs in the frame that admitted it until its first
suspension. A method that never suspends costs no task and no loop iteration; one that does
continues in the task of the local caller that awaits it (3.11, ``_util.carrier``) or in a
Task that owns the rest of the turn.
"""

from __future__ import annotations

import asyncio
from contextvars import Context, copy_context
from functools import partial
from time import perf_counter
from types import GeneratorType
from typing import TYPE_CHECKING, Any, Final, Protocol

from orleanspy._util.eager import eager_start
from orleanspy._util.futures import reply_to
from orleanspy._util.histogram import SAMPLE_MASK as _SAMPLE_MASK
from orleanspy._util.histogram import TIME_ALL as _TIME_ALL
from orleanspy.diagnostics import CallFailed
from orleanspy.errors import (
    GrainCallTimeoutError,
    InconsistentStateError,
    InternalError,
    MessageRejectedError,
)
from orleanspy.grains.context import current_turn, reentrancy_scope
from orleanspy.grains.host import DeactivationReason
from orleanspy.grains.interface import OverflowPolicy
from orleanspy.grains.request_context import get_context as _get_context
from orleanspy.grains.request_context import set_context as _set_context
from orleanspy.ids import GrainId
from orleanspy.messaging.message import (
    FLAG_ALWAYS_INTERLEAVE,
    FLAG_CANCELLABLE,
    FLAG_CANCELLED,
    FLAG_READ_ONLY,
    FLAG_SUPPRESS_KEEP_ALIVE,
    LONG_AGO,
    Message,
)
from orleanspy.runtime.activation_state import NOT_NOW, ActivationState
from orleanspy.runtime.call_filters import IncomingChains
from orleanspy.runtime.call_stats import UNKNOWN as STATS_UNKNOWN
from orleanspy.runtime.call_stats import MethodStats
from orleanspy.runtime.host import SiloHost
from orleanspy.runtime.mailbox import Mailbox

if TYPE_CHECKING:
    from collections.abc import Callable

    from orleanspy._util.carrier import Carrier

__all__ = ["TurnHost", "Turns"]

# Enum members read on every call: as module constants (a class attribute of an enum costs
# several times a global lookup on Python 3.11).
_VALID: Final = ActivationState.VALID
_DEACTIVATING: Final = ActivationState.DEACTIVATING


_Generator = GeneratorType
_Future = asyncio.Future


class _Watcher(Protocol):
    def watch(self, msg: Message, carrier: Carrier) -> None: ...

    def unwatch(self, msg: Message) -> None: ...


class TurnHost(SiloHost, Protocol):
    """What turns need from the silo hosting their activation (``ActivationHost`` adds the
    rest of what an activation needs)."""

    @property
    def dispatcher(self) -> _Watcher:
        """Watches the response deadline of a turn its caller carries."""
        ...

    def log_grain_error(self, event: str, **fields: Any) -> None:
        """Log an exception a grain method raised (at the silo's configured level)."""
        ...


class Turns(Mailbox):
    """The turns of one activation: started, ended, replied to and counted."""

    __slots__ = ("_now", "calls", "completed", "failed", "incoming", "last_active", "received",
                 "tasks")

    # Kept by the activation; read here.
    silo: TurnHost
    grain: Any
    grain_id: GrainId

    def __init__(self, capacity: int, policy: OverflowPolicy, now: Callable[[], float],
                 calls: dict[str, MethodStats] | None) -> None:
        super().__init__(capacity, policy)
        self._now = now
        #: this grain type's per-method statistics (None: off)
        self.calls = calls
        self.received = self.completed = self.failed = 0
        #: when a turn last ended (calls that suppress keep-alive aside), on ``now``
        self.last_active = now()
        #: the Tasks of this activation's suspended turns that run in a Task of their own,
        #: by message id (a carried turn's current task is its message's ``runner``)
        self.tasks: dict[int, asyncio.Task[Any]] = {}
        #: the incoming call filters of this activation's class, or None (no filter)
        self.incoming: IncomingChains | None = None

    def deactivate(self, reason: DeactivationReason) -> None:
        """Start deactivation (the activation's)."""
        raise NotImplementedError

    def _maybe_teardown(self) -> None:
        """Tear down once no turn runs, if deactivating (the activation's)."""
        raise NotImplementedError

    # -- a turn's start ----------------------------------------------------------------------
    def _start(self, msg: Message, inline: bool) -> Any:
        """Run a turn in its own task, started eagerly (``_util.eager``).

        ``inline``: a local request that runs in the caller's frame if it may start now
        (the dispatcher's local calls) — return the result, raise the error, return the
        carrying awaitable (or a future, resolved through ``msg.reply``) if the turn
        suspended, or ``NOT_NOW``.
        Otherwise the turn was admitted and its outcome goes to ``msg.reply``.
        """
        if inline:
            if (
                self.running or self.waiting or self.state is not _VALID
            ) and not self._admissible_now(msg):
                return NOT_NOW
            self.received += 1
        deadline = msg.deadline
        if deadline and deadline < self._now():
            self._expire(msg)
            return None
        self.running[msg.id] = msg
        calls = self.calls
        if calls is not None and msg.invoke is None:
            # Count every call; time them as runtime.call_stats samples.
            stats = calls.get(msg.method)
            if stats is None:
                stats = self._method_stats(msg.method)
            # ``stats.due()`` inlined but for its rare branch (a window's roll): a Python
            # call less per call, about 4 % of a suspending call (``benchmarks/grain_calls.py``
            # row ``suspending_100``).
            n = stats.seen
            stats.seen = n + 1
            if n < _TIME_ALL:
                msg.started = perf_counter()
            elif n & _SAMPLE_MASK:
                msg.started = 0.0
            else:
                stats.seen = n
                msg.started = perf_counter() if stats.due() else 0.0
        blocking = self.blocking
        if not msg.flags & FLAG_ALWAYS_INTERLEAVE and (
            blocking is None
            or (blocking.flags & FLAG_READ_ONLY and not msg.flags & FLAG_READ_ONLY)
        ):
            self.blocking = msg  # a write that got in (reentrancy) blocks read-only calls
        try:
            if msg.invoke is not None:
                coro = msg.invoke()
            elif self.incoming is not None:  # filters, or a streamed response
                coro = self.incoming.start(self, msg)
            elif msg.kwargs:
                coro = getattr(self.grain, msg.method)(*msg.args, **msg.kwargs)
            else:
                coro = getattr(self.grain, msg.method)(*msg.args)
        except Exception as exc:  # e.g. wrong arguments: the caller's error
            self._finish(msg, exc)
            if inline:
                raise
            self._deliver(msg, False, exc)
            return None
        # The turn's own context: the caller's, with this turn current and no reentrancy
        # scope (set with C calls only: this runs for every call).
        msg.activation = self
        context = copy_context()
        context.run(_set_turn, msg)
        if not inline and msg.rc is not _get_context():
            # A turn sees its own request's context only (an inline turn's is its caller's).
            context.run(_set_context, msg.rc)
        if reentrancy_scope.get():
            context.run(reentrancy_scope.set, False)
        try:
            task, result = eager_start(self.silo.loop, coro, context, None, None, msg, self,
                                       inline)
        except BaseException as error:
            failure = _cancelled(self, msg) if isinstance(error, asyncio.CancelledError) else error
            self._finish(msg, failure)
            if inline:
                if failure is error:
                    raise
                raise failure from None
            self._deliver(msg, False, failure)
            if isinstance(failure, (KeyboardInterrupt, SystemExit)):
                raise  # the process's, wherever it surfaces; any other went to the reply
            return None
        if task is None:
            self._finish(msg, None)
            if inline:
                return result
            self._deliver(msg, True, result)
            return None
        if type(task) is _Generator:
            return task  # ``carry``: the caller's task runs the rest of the turn
        self.tasks[msg.id] = task
        if msg.flags & FLAG_CANCELLABLE and deadline:  # cancelled once its caller stops waiting
            clock = self.silo.clock
            clock.call_later(max(0.0, deadline - clock.monotonic()), self.cancel_request, msg)
        if inline:
            fut: asyncio.Future[Any] = _Future(loop=self.silo.loop)
            msg.reply = partial(reply_to, fut)
            return fut
        return None

    def _expire(self, msg: Message) -> None:
        """Drop a queued request whose caller gave up (its deadline passed, or it cancelled
        the call) before it could start."""
        self.expired += 1
        why = ("its caller cancelled it" if msg.flags & FLAG_CANCELLED
               else "its caller's deadline had passed")
        self.silo.log.debug("request_expired", grain=self.name, method=msg.method, reason=why)
        self._deliver(msg, False, GrainCallTimeoutError(
            f"{self.name}.{msg.method} was dropped unstarted: {why}"
        ))

    def cancel_request(self, msg: Message) -> None:
        """The caller of ``msg`` gave up on it: a queued request never starts; a running
        ``@cancellable`` turn is cancelled at its next await; any other running turn goes
        on. A turn already ended is left alone."""
        if msg.id in self.running:
            if msg.flags & FLAG_CANCELLABLE:
                nested = getattr(msg, "carrying", None)
                if nested is not None and nested.id in nested.activation.running:
                    # It carries a local call's turn (3.11): give that call up as a cancel of
                    # its task would (the call's turn goes on in a Task of its own, or is
                    # cancelled in turn), so that this turn gets the CancelledError where it
                    # awaits the call, not the call's turn.
                    carrier = nested.runner._carrier
                    if carrier is not None:
                        carrier.cancel(_CALLER_GAVE_UP)
                        return
                    # (not waiting for a future yet: within a loop pass it will be)
                    self.silo.loop.call_soon(self.cancel_request, msg)
                    return
                task = self.tasks.get(msg.id)
                if task is None:
                    task = getattr(msg, "runner", None)  # a carried turn's current task
                if task is not None:
                    task.cancel(_CALLER_GAVE_UP)
            return
        if not getattr(msg, "activation", None):  # not started: dropped when it would start
            msg.flags |= FLAG_CANCELLED
            msg.deadline = LONG_AGO

    def _turn_done(self, msg: Message, ok: bool, value: Any) -> None:
        """A turn that suspended has ended (``eager.Continuation`` calls this in its Task's
        last step): finish it, reply, and start what waits, in a context of its own (not
        the ended turn's)."""
        self.tasks.pop(msg.id, None)
        if ok:
            exc: BaseException | None = None
        elif isinstance(value, asyncio.CancelledError):
            exc = _cancelled(self, msg)
        else:
            exc = value
        if self.waiting or self.state is not _VALID:
            # What starts now (a waiting turn, the teardown) must not inherit its context.
            Context().run(self._reply, msg, exc, value)
        else:
            self._reply(msg, exc, value)

    def turn_ended(self, msg: Message, exc: BaseException | None, watched: bool
                   ) -> BaseException | None:
        """A turn its caller carried has ended (``_util.carrier``): finish it and start what
        waits, in a context of its own. Returns the error its caller raises."""
        if watched:
            self.silo.dispatcher.unwatch(msg)
        if exc is not None and isinstance(exc, asyncio.CancelledError):
            exc = _cancelled(self, msg)
        if self.waiting or self.state is not _VALID:
            Context().run(self._finish, msg, exc)
        else:
            self._finish(msg, exc)
        return exc

    def turn_suspended(self, msg: Message, carrier: Carrier) -> None:
        """A carried turn may take a while: the dispatcher watches its caller's deadline."""
        self.silo.dispatcher.watch(msg, carrier)

    def turn_detached(self, msg: Message, task: asyncio.Task[Any]) -> None:
        """The caller of a carried turn gave up on it (cancelled, or its deadline passed):
        ``task`` runs the rest of the turn, and its outcome has nobody to go to."""
        self.tasks[msg.id] = task
        msg.reply = _nobody_waits
        self.silo.dispatcher.unwatch(msg)
        if msg.flags & FLAG_CANCELLABLE:  # once the turn's own task has taken over
            self.silo.loop.call_soon(self.cancel_request, msg)

    def turn_waits(self) -> list[asyncio.Future[Any]]:
        """Futures that resolve as this activation's suspended turns that run in a Task of
        their own end (a carried turn ends in its caller's task: the silo looks again)."""
        return list(self.tasks.values())

    def cancel_turns(self) -> None:
        """Cancel every suspended turn (the silo's shutdown ran out of time)."""
        for task in list(self.tasks.values()):
            task.cancel()
        for msg in list(self.running.values()):
            stand_in = getattr(msg, "runner", None)  # a carried turn's current task
            if stand_in is not None:
                stand_in.cancel()

    turn_done = _turn_done

    def _reply(self, msg: Message, exc: BaseException | None, value: Any) -> None:
        self._finish(msg, exc)
        try:
            if exc is None:
                self._deliver(msg, True, value)
            else:
                self._deliver(msg, False, exc)
        except Exception as err:  # the reply itself failed (e.g. unencodable result)
            self.silo.log.error("grain_reply_failed", grain=self.name, method=msg.method,
                                error=repr(err))
            if msg.reply is not None:
                msg.reply(False, InternalError(f"the reply of {msg.method} failed: {err!r}"))

    def _finish(self, msg: Message, exc: BaseException | None) -> None:
        running = self.running
        del running[msg.id]
        if self.blocking is msg:
            self.blocking = None
            if running:
                self._recompute_blocking()
        calls = self.calls
        if calls is not None and msg.invoke is None and (msg.started or exc is not None):
            stats = calls.get(msg.method) or calls[STATS_UNKNOWN]
            if msg.started:
                stats.record(perf_counter() - msg.started)
            if exc is not None:
                stats.errors += 1
        if exc is None:
            self.completed += 1
        else:
            self.failed += 1
            self.silo.log_grain_error("grain_call_failed", grain=self.name, method=msg.method,
                                      error=repr(exc))
            diag = self.silo.diagnostics
            if diag.listening:
                diag.emit(CallFailed(silo=self.silo.name, grain_id=self.grain_id,
                                     method=msg.method, error=repr(exc)))
            if isinstance(exc, InconsistentStateError):
                self.deactivate(DeactivationReason.INCONSISTENT_STATE)
        if not msg.flags & FLAG_SUPPRESS_KEEP_ALIVE:
            self.last_active = self._now()
        if self.waiting:
            self._pump()
        if self.state is _DEACTIVATING and not running:
            self._maybe_teardown()

    def _method_stats(self, method: str) -> MethodStats:
        """A method's statistics entry; names that are not the grain's methods (a local
        caller's typo, which fails as the call does) share one entry, so that no caller
        can grow the table."""
        assert self.calls is not None
        name = method if method in self.info.methods else STATS_UNKNOWN
        stats = self.calls.get(name)
        if stats is None:
            stats = self.calls[name] = MethodStats()
        return stats


_set_turn = current_turn.set

#: the cancel message of a ``@cancellable`` turn whose caller gave up
_CALLER_GAVE_UP = "the caller gave up on the call"


def _nobody_waits(ok: bool, value: Any) -> None:
    """The reply of a turn whose caller gave up on it (the turn logs its own failure)."""


def _cancelled(activation: Turns, msg: Message) -> MessageRejectedError:
    if msg.flags & FLAG_CANCELLABLE:
        return MessageRejectedError(
            f"request {msg.method} on {activation.name} was cancelled (its caller gave up, "
            "the activation is shutting down, or the grain cancelled its own task)",
            "cancelled",
        )
    return MessageRejectedError(
        f"request {msg.method} on {activation.name} was cancelled (the activation is "
        "shutting down or the grain cancelled its own task)",
        "cancelled",
    )
