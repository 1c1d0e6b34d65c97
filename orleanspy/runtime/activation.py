"""Activation: one live instance of a grain — its life (activate, deactivate) and its turns.

What may start when is decided by ``admission``; where messages wait, and what happens
when there is no room, by ``mailbox`` (both are bases of ``Activation``).

A turn starts *eagerly*: the grain method runs in the frame that admitted it until its first
suspension (``_util.eager``). A method that never suspends costs no task and no loop
iteration; one that does continues in a Task that owns the rest of the turn.
The host protocols sit here because they name ``Activation`` itself; a turn's start, its
ends (in its frame, carried by its caller, in a Task) and its accounting share private state,
which is why the module stays one (about 660 lines).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from contextvars import Context, copy_context
from functools import partial
from time import perf_counter
from types import GeneratorType
from typing import TYPE_CHECKING, Any, Final, Protocol

from orleanspy._util.eager import eager_start
from orleanspy._util.futures import reply_to
from orleanspy.diagnostics import ActivationCreated, ActivationDeactivated, CallFailed
from orleanspy.errors import (
    ActivationFailedError,
    GrainCallTimeoutError,
    InconsistentStateError,
    InternalError,
    MessageRejectedError,
)
from orleanspy.grains.context import current_turn, reentrancy_scope
from orleanspy.grains.host import DeactivationReason
from orleanspy.grains.interface import GrainClassInfo
from orleanspy.grains.state import PersistentState, StateSpec
from orleanspy.ids import GrainId
from orleanspy.messaging.message import (
    FLAG_ALWAYS_INTERLEAVE,
    FLAG_READ_ONLY,
    FLAG_SUPPRESS_KEEP_ALIVE,
    Direction,
    Message,
)
from orleanspy.runtime.activation_state import NOT_NOW, ActivationState, ActivationStatistics
from orleanspy.runtime.call_stats import LAST as STATS_LAST
from orleanspy.runtime.call_stats import ROLL_MASK as STATS_ROLL_MASK
from orleanspy.runtime.call_stats import SAMPLE_MASK as STATS_SAMPLE_MASK
from orleanspy.runtime.call_stats import SCALE as STATS_SCALE
from orleanspy.runtime.call_stats import TIME_ALL as STATS_TIME_ALL
from orleanspy.runtime.call_stats import UNKNOWN as STATS_UNKNOWN
from orleanspy.runtime.call_stats import CallStatistics, MethodStats
from orleanspy.runtime.host import SiloHost
from orleanspy.runtime.locator import GrainLocator
from orleanspy.runtime.mailbox import Mailbox
from orleanspy.runtime.timers import GrainTimer

if TYPE_CHECKING:
    from orleanspy._util.carrier import Carrier

__all__ = [
    "NOT_NOW",
    "Activation",
    "ActivationHost",
    "ActivationState",
    "ActivationStatistics",
    "DeactivationReason",
]


_Generator = GeneratorType
_Future = asyncio.Future


class _Catalog(Protocol):
    def remove(self, act: Activation) -> None: ...


class _Redispatcher(Protocol):
    def redispatch(self, msg: Message) -> None: ...

    def watch(self, msg: Message, carrier: Carrier) -> None: ...

    def unwatch(self, msg: Message) -> None: ...


class ActivationHost(SiloHost, Protocol):
    """What an activation needs from the silo hosting it (the silo implements it; grains
    see it as ``Grain.silo``). The catalog, dispatcher and locator are read on use: an
    activation reaches them only when it registers, fails or goes away."""

    @property
    def locator(self) -> GrainLocator: ...

    @property
    def catalog(self) -> _Catalog: ...

    @property
    def dispatcher(self) -> _Redispatcher: ...

    @property
    def call_statistics(self) -> CallStatistics: ...

    def make_state(self, spec: StateSpec[Any], grain_id: GrainId) -> PersistentState[Any]:
        """The persistent state ``spec`` of a grain, bound to its storage."""
        ...

    def log_grain_error(self, event: str, **fields: Any) -> None:
        """Log an exception a grain method raised (at the silo's configured level)."""
        ...


class Activation(Mailbox):
    """One live instance of a grain class for one grain id."""

    __slots__ = (
        "_deactivated",
        "_now",
        "_teardown_started",
        "calls",
        "completed",
        "error",
        "failed",
        "grain",
        "grain_id",
        "info",
        "keep_alive_until",
        "last_active",
        "name",
        "reason",
        "received",
        "silo",
        "state",
        "states",
        "tasks",
        "timers",
    )

    silo: ActivationHost

    def __init__(self, silo: ActivationHost, grain_id: GrainId, info: GrainClassInfo) -> None:
        self.silo = silo
        self.grain_id = grain_id
        self.name = str(grain_id)
        cap = info.mailbox_capacity
        super().__init__(silo.options.mailbox_capacity if cap is None else cap, info.overflow)
        self.info = info
        self.grain: Any = None
        self.state = ActivationState.ACTIVATING
        self._now = silo.clock.monotonic
        self.last_active = self._now()
        self.keep_alive_until = 0.0
        self.reason: DeactivationReason | None = None
        self.error: BaseException | None = None
        self.timers: set[GrainTimer] = set()
        #: the Tasks of this activation's suspended turns that run in a Task of their own,
        #: by message id (a carried turn's current task is its message's ``runner``)
        self.tasks: dict[int, asyncio.Task[Any]] = {}
        self.states: dict[str, PersistentState[Any]] = {}
        self._deactivated: asyncio.Future[None] | None = None
        self._teardown_started = False
        self.received = self.completed = self.failed = 0
        self.calls = silo.call_statistics.table(grain_id.type_name)

    def __repr__(self) -> str:
        return f"<Activation {self.name} {self.state.name}>"

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        """Create the grain object, read its state and run on_activate (eagerly)."""
        self._run_internal(self._activate())

    async def _activate(self) -> None:
        info = self.info
        try:
            locator = self.silo.locator
            if locator.uses_directory(info):
                winner = await locator.register_activation(self)
                if winner is not None:
                    self._become_duplicate(winner)
                    return
            cls: Any = info.cls
            grain = cls.__new__(cls)
            grain._orleanspy_activation = self
            grain.__dict__["_orleanspy_states"] = self.states
            for attr, spec in info.states.items():
                ps = self.silo.make_state(spec, self.grain_id)
                self.states[attr] = ps
                await ps.read()
            grain.__init__()
            self.grain = grain
            await grain.on_activate()
        except BaseException as exc:  # incl. CancelledError: the activation must not hang
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            self.silo.log.warning(
                "grain_activation_failed", grain=self.name, error=repr(exc)
            )
            err = ActivationFailedError(f"activation of {self.name} failed: {exc!r}")
            err.__cause__ = exc
            self._fail_activation(err)
            return
        if self.state is ActivationState.ACTIVATING:
            self.state = ActivationState.VALID
            self.silo.log.debug("grain_activated", grain=self.name)
            diag = self.silo.diagnostics
            if diag.listening:
                diag.emit(ActivationCreated(silo=self.silo.name, grain_id=self.grain_id))
        self.last_active = self.silo.clock.monotonic()
        if self.state is ActivationState.DEACTIVATING:
            self._maybe_teardown()
        elif self.waiting:
            self._pump()

    def _fail_activation(self, err: BaseException) -> None:
        for timer in list(self.timers):
            timer.dispose()
        self.error = err
        self.state = ActivationState.INVALID
        self.reason = DeactivationReason.ACTIVATION_FAILED
        self.silo.catalog.remove(self)
        pending = self._take_pending()
        for msg in pending:
            self._deliver(msg, False, err)
        self._set_deactivated()

    def _become_duplicate(self, winner: Any) -> None:
        """Another silo's activation won the directory registration: this one never runs;
        its queued messages go to the winner (one more hop each)."""
        locator = self.silo.locator
        self.state = ActivationState.INVALID
        self.reason = DeactivationReason.DUPLICATE
        self.silo.catalog.remove(self)
        pending = self._take_pending()
        for msg in pending:
            locator.forward(msg, winner)
        self._set_deactivated()

    @property
    def closing(self) -> bool:
        """Deactivating or gone: timers stop, nothing new is admitted."""
        return self.state >= ActivationState.DEACTIVATING

    def start_timer(
        self,
        callback: Callable[[], Awaitable[Any]],
        due: float,
        period: float | None,
        *,
        interleave: bool,
        keep_alive: bool,
        name: str | None,
    ) -> GrainTimer:
        """A timer of this activation, started (``Grain.register_timer``)."""
        timer = GrainTimer(self, callback, due, period, interleave=interleave,
                           keep_alive=keep_alive, name=name)
        timer.start()
        return timer

    def deactivate(self, reason: DeactivationReason) -> None:
        """Start deactivation: queued and new messages go to the next activation."""
        if self.state >= ActivationState.DEACTIVATING:
            return
        self.reason = reason
        was_activating = self.state is ActivationState.ACTIVATING
        self.state = ActivationState.DEACTIVATING
        for timer in list(self.timers):
            timer.dispose()
        if not was_activating:
            self._maybe_teardown()

    async def wait_deactivated(self) -> None:
        if self.state is ActivationState.INVALID:
            return
        if self._deactivated is None:
            self._deactivated = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._deactivated)

    def _set_deactivated(self) -> None:
        diag = self.silo.diagnostics
        if diag.listening:
            diag.emit(ActivationDeactivated(
                silo=self.silo.name, grain_id=self.grain_id, reason=str(self.reason)
            ))
        if self._deactivated is not None and not self._deactivated.done():
            self._deactivated.set_result(None)

    def _maybe_teardown(self) -> None:
        if self.running or self._teardown_started:
            return
        self._teardown_started = True
        task = asyncio.get_running_loop().create_task(self._teardown())
        self.silo.track(task)

    async def _teardown(self) -> None:
        for timer in list(self.timers):
            timer.dispose()
        grain = self.grain
        token = current_turn.set(_marker("deactivate", self))
        try:
            if grain is not None and self.reason is not DeactivationReason.DECLARED_DEAD:
                try:
                    await grain.on_deactivate(self.reason)
                except Exception as exc:
                    self.silo.log.warning(
                        "grain_on_deactivate_failed", grain=self.name, error=repr(exc)
                    )
                if self.reason is not DeactivationReason.INCONSISTENT_STATE:
                    await self._flush_states()
        finally:
            current_turn.reset(token)
            self.state = ActivationState.INVALID
            self.silo.catalog.remove(self)
            self.silo.log.debug("grain_deactivated", grain=self.name,
                                reason=self.reason.name if self.reason else None)
            pending = list(self.waiting) + [m for m, _ in self.blocked]
            for _, fut in self.blocked:
                if fut is not None and not fut.done():
                    fut.set_result(None)
            self.waiting.clear()
            self.blocked.clear()
            for msg in pending:
                if msg.invoke is None:  # timer ticks die with their activation
                    self.silo.dispatcher.redispatch(msg)
            self._set_deactivated()

    async def _flush_states(self) -> None:
        for attr, ps in self.states.items():
            spec = self.info.states[attr]
            if not spec.write_on_deactivate:
                continue
            try:
                if ps.is_dirty():
                    await ps.write()
            except Exception as exc:
                self.silo.log.error(
                    "grain_state_flush_failed", grain=self.name, state=ps.name, error=repr(exc)
                )

    # -- receiving ------------------------------------------------------------------------
    def enqueue(self, msg: Message, wait: bool = False) -> asyncio.Future[None] | None:
        """Queue a message (any origin); its outcome goes to ``msg.reply``.

        Returns a future that resolves when the message enters the mailbox if it had to
        wait for room and ``wait`` is set (one-way calls under the ``suspend`` policy).
        Raises ``MailboxFullError`` for a one-way message refused by the ``reject`` policy,
        and ``DeadlockError`` for a request that would wait on itself.
        """
        state = self.state
        if state is ActivationState.INVALID:
            if self.error is not None:  # activation failed: its callers get the error
                self._deliver(msg, False, self.error)
            elif msg.invoke is not None:
                pass  # a timer tick of a gone activation dies with it
            else:
                self.silo.dispatcher.redispatch(msg)
            return None
        self.received += 1
        # An idle activation admits anything: the common case, decided without the rules.
        if (not self.running and not self.waiting and state is ActivationState.VALID
                ) or self._admissible_now(msg):
            self._start(msg, False)
            return None
        waiting = self.waiting
        if len(waiting) >= self.capacity and not self._is_self_call(msg):
            return self._overflow(msg, wait)
        waiting.append(msg)
        if len(waiting) > self.max_queued:
            self.max_queued = len(waiting)
        if self._is_special(msg):
            self.special_waiting += 1
        if self.silo.diagnostics.listening:
            self._report_queued(msg, False)
        return None

    # -- turns ----------------------------------------------------------------------------
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
                self.running or self.waiting or self.state is not ActivationState.VALID
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
            n = stats.seen  # Histogram.due, inlined
            stats.seen = n + 1
            if n < STATS_TIME_ALL or not n & STATS_SAMPLE_MASK:
                if n >= STATS_TIME_ALL and not n & STATS_ROLL_MASK:
                    stats.roll()
                msg.started = perf_counter()
            else:
                msg.started = 0.0
        blocking = self.blocking
        if not msg.flags & FLAG_ALWAYS_INTERLEAVE and (
            blocking is None
            or (blocking.flags & FLAG_READ_ONLY and not msg.flags & FLAG_READ_ONLY)
        ):
            self.blocking = msg  # a write that got in (reentrancy) blocks read-only calls
        try:
            if msg.invoke is not None:
                coro = msg.invoke()
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
        if inline:
            fut: asyncio.Future[Any] = _Future(loop=self.silo.loop)
            msg.reply = partial(reply_to, fut)
            return fut
        return None

    def _expire(self, msg: Message) -> None:
        """Drop a queued request whose caller's deadline passed before it could start."""
        self.expired += 1
        self.silo.log.debug("request_expired", grain=self.name, method=msg.method)
        self._deliver(msg, False, GrainCallTimeoutError(
            f"{self.name}.{msg.method} was dropped unstarted: its caller's deadline had passed"
        ))

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
        if self.waiting or self.state is not ActivationState.VALID:
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
        if self.waiting or self.state is not ActivationState.VALID:
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
            if msg.started:  # Histogram.record, inlined: this runs per timed call
                took = perf_counter() - msg.started
                stats.seconds += took
                i = int(took * STATS_SCALE).bit_length()
                stats.buckets[i if i < STATS_LAST else STATS_LAST] += 1
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
        if self.state is ActivationState.DEACTIVATING and not running:
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

    def _run_internal(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run a runtime coroutine (activation) eagerly under this activation's context."""
        try:
            task, _ = eager_start(
                self.silo.loop, coro, copy_context(), _enter_turn, self,
                _marker("activate", self)
            )
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            raise InternalError(f"activation of {self.name} crashed") from exc
        if task is not None:
            self.silo.track(task)

    # -- keep-alive and statistics ---------------------------------------------------------
    def is_idle(self, now: float, age: float) -> bool:
        return (
            self.state is ActivationState.VALID
            and not self.running
            and not self.waiting
            and not self.blocked
            and now >= self.keep_alive_until
            and now - self.last_active >= age
        )

    def statistics(self) -> ActivationStatistics:
        return ActivationStatistics(
            grain_id=self.name,
            state=self.state.name.lower(),
            received=self.received,
            completed=self.completed,
            failed=self.failed,
            running=len(self.running),
            queued=len(self.waiting),
            max_queued=self.max_queued,
            blocked_senders=len(self.blocked),
            suspended=self.suspended,
            rejected=self.rejected,
            dropped_newest=self.dropped_newest,
            dropped_oldest=self.dropped_oldest,
            idle_seconds=max(0.0, self.silo.clock.monotonic() - self.last_active),
            expired=self.expired,
        )


_set_turn = current_turn.set


def _enter_turn(activation: Activation, msg: Message) -> None:
    """Runs inside the turn's fresh context: the turn is this one, no reentrancy scope."""
    msg.activation = activation
    current_turn.set(msg)
    if reentrancy_scope.get():
        reentrancy_scope.set(False)


def _nobody_waits(ok: bool, value: Any) -> None:
    """The reply of a turn whose caller gave up on it (the turn logs its own failure)."""


def _cancelled(activation: Activation, msg: Message) -> MessageRejectedError:
    return MessageRejectedError(
        f"request {msg.method} on {activation.name} was cancelled (the activation is "
        "shutting down or the grain cancelled its own task)",
        "cancelled",
    )


def _marker(name: str, activation: Activation) -> Message:
    """The message of a runtime turn of ``activation`` (its activation or teardown)."""
    msg = Message(Direction.ONE_WAY, _RUNTIME_IDS[name], name, (), None)
    msg.activation = activation
    return msg


_RUNTIME_IDS: Final = {n: GrainId("orleanspy.runtime", n) for n in ("activate", "deactivate")}
