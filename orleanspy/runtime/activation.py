"""Activation: one live instance of a grain — its life (activate, deactivate, timers), what
it receives, and its statistics.

The rest is in its bases, one concern each: ``admission`` decides what may start when,
``mailbox`` holds what must wait (and applies the overflow policy), ``turns`` runs a turn
and ends it (eagerly, ``_util.eager``). The host protocols sit here because they name
``Activation`` itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from contextvars import copy_context
from typing import TYPE_CHECKING, Any, Final, Protocol

from orleanspy._util.eager import eager_start
from orleanspy.diagnostics import ActivationCreated, ActivationDeactivated
from orleanspy.errors import ActivationFailedError, InternalError
from orleanspy.grains.context import current_turn, reentrancy_scope
from orleanspy.grains.host import DeactivationReason
from orleanspy.grains.interface import GrainClassInfo
from orleanspy.grains.state import PersistentState, StateSpec
from orleanspy.ids import GrainId
from orleanspy.messaging.message import Direction, Message
from orleanspy.runtime.activation_state import NOT_NOW, ActivationState, ActivationStatistics
from orleanspy.runtime.call_filters import CallFilters
from orleanspy.runtime.call_stats import CallStatistics
from orleanspy.runtime.locator import GrainLocator
from orleanspy.runtime.streamed_calls import close_all, close_streamed, pull_streamed
from orleanspy.runtime.timers import GrainTimer
from orleanspy.runtime.turns import TurnHost, Turns

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

# Enum members read on every call: as module constants (see runtime/turns.py).
_VALID: Final = ActivationState.VALID
_INVALID: Final = ActivationState.INVALID


class _Catalog(Protocol):
    def remove(self, act: Activation) -> None: ...


class _Redispatcher(Protocol):
    def redispatch(self, msg: Message) -> None: ...

    def watch(self, msg: Message, carrier: Carrier) -> None: ...

    def unwatch(self, msg: Message) -> None: ...


class ActivationHost(TurnHost, Protocol):
    """What an activation needs from the silo hosting it (the silo implements it; grains
    see it as ``Grain.silo``): what its turns need, and more. The catalog, dispatcher and
    locator are read on use: an activation reaches them only when it registers, fails or
    goes away."""

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

class Activation(Turns):
    """One live instance of a grain class for one grain id."""

    __slots__ = (
        "_deactivated",
        "_teardown_started",
        "created_at",
        "error",
        "grain",
        "grain_id",
        "info",
        "keep_alive_until",
        "name",
        "reason",
        "silo",
        "state",
        "states",
        "streamed",
        "timers",
    )

    silo: ActivationHost

    def __init__(self, silo: ActivationHost, grain_id: GrainId, info: GrainClassInfo) -> None:
        self.silo = silo
        self.grain_id = grain_id
        self.name = str(grain_id)
        self.created_at = silo.clock.time()  # wall clock: the grain page's "since"
        cap = info.mailbox_capacity
        now = silo.clock.monotonic
        super().__init__(silo.options.mailbox_capacity if cap is None else cap, info.overflow,
                         now, silo.call_statistics.table(grain_id.type_name))
        self.info = info
        # How a turn starts when it is not a plain call (filters, streamed responses).
        filters = getattr(silo, "call_filters", None) or CallFilters()
        self.incoming = filters.incoming(info)
        self.grain: Any = None
        self.state = ActivationState.ACTIVATING
        self.keep_alive_until = 0.0
        self.reason: DeactivationReason | None = None
        self.error: BaseException | None = None
        self.timers: set[GrainTimer] = set()
        #: its streamed responses still open, by token (``runtime.streamed_calls``)
        self.streamed: dict[str, Any] | None = None
        self.states: dict[str, PersistentState[Any]] = {}
        self._deactivated: asyncio.Future[None] | None = None
        self._teardown_started = False

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
        close_all(self)  # its streamed responses still open end
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
            self._release_blocked()
            self.waiting.clear()
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
        if state is _INVALID:
            if self.error is not None:  # activation failed: its callers get the error
                self._deliver(msg, False, self.error)
            elif msg.invoke is not None:
                pass  # a timer tick of a gone activation dies with it
            else:
                self.silo.dispatcher.redispatch(msg)
            return None
        self.received += 1
        # An idle activation admits anything: the common case, decided without the rules.
        if (not self.running and not self.waiting and state is _VALID
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

    # -- runtime turns ------------------------------------------------------------------
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

    async def pull_streamed(self, token: str, count: int) -> dict[str, Any]:
        """The next items of one of this activation's streamed responses."""
        return await pull_streamed(self, token, count)

    async def close_streamed(self, token: str) -> bool:
        """End one of this activation's streamed responses (its caller stopped early)."""
        return await close_streamed(self, token)

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


def _enter_turn(activation: Activation, msg: Message) -> None:
    """Runs inside the turn's fresh context: the turn is this one, no reentrancy scope."""
    msg.activation = activation
    current_turn.set(msg)
    if reentrancy_scope.get():
        reentrancy_scope.set(False)


def _marker(name: str, activation: Activation) -> Message:
    """The message of a runtime turn of ``activation`` (its activation or teardown)."""
    msg = Message(Direction.ONE_WAY, _RUNTIME_IDS[name], name, (), None)
    msg.activation = activation
    return msg


_RUNTIME_IDS: Final = {n: GrainId("orleanspy.runtime", n) for n in ("activate", "deactivate")}
