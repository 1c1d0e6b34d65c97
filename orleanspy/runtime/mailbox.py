"""Mailbox: an activation's queue, its capacity and the overflow policy.

Requests that find the mailbox (``waiting``) full wait in ``blocked`` (their callers stay
suspended) and move in as room frees (a gateway counts them among its client's requests in
flight, and stops reading the client at its cap: ``runtime/gateway.py``); one-way messages
follow the class's overflow policy (suspend, reject, drop newest, drop oldest). Calls a grain
makes to itself and timer ticks are never held back. A client's request forwarded by another
silo has no connection here to slow down: once ``MAX_FORWARDED_BLOCKED`` requests wait for
room, such a request is refused (``MailboxFullError``, which its caller receives) rather than
queued, so what clients send through other gateways cannot grow a silo's memory without bound.
``Mailbox`` is a base of ``Activation`` (see ``admission``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Final

from orleanspy.diagnostics import RequestQueued
from orleanspy.errors import DeadlockError, MailboxFullError
from orleanspy.grains.interface import OverflowPolicy
from orleanspy.messaging.message import FLAG_FROM_CLIENT, FLAG_SELF_CALL, Direction, Message
from orleanspy.runtime.activation_state import ActivationState
from orleanspy.runtime.admission import Admission
from orleanspy.runtime.host import SiloHost

__all__ = ["MAX_FORWARDED_BLOCKED", "Mailbox"]

# Enum members read per message: as module constants (see runtime/turns.py).
_VALID: Final = ActivationState.VALID
_ONE_WAY: Final = Direction.ONE_WAY

#: Requests that may wait for room in one mailbox before a client's request forwarded by
#: another silo is refused instead of waiting.
MAX_FORWARDED_BLOCKED: Final = 1000


class Mailbox(Admission):
    """The queue of one activation."""

    __slots__ = (
        "_pumping",
        "blocked",
        "capacity",
        "dropped_newest",
        "dropped_oldest",
        "expired",
        "max_queued",
        "policy",
        "rejected",
        "suspended",
        "waiting",
    )

    silo: SiloHost

    def __init__(self, capacity: int, policy: OverflowPolicy) -> None:
        super().__init__()
        self.waiting: deque[Message] = deque()
        self.blocked: deque[tuple[Message, asyncio.Future[None] | None]] = deque()
        self.capacity = capacity
        self.policy = policy
        self.max_queued = self.suspended = self.rejected = 0
        self.dropped_newest = self.dropped_oldest = self.expired = 0
        self._pumping = False

    def _start(self, msg: Message, inline: bool) -> Any:
        """Run ``msg`` as a turn (the activation's)."""
        raise NotImplementedError

    def _pump(self) -> None:
        """Start every queued message that may run now, in order."""
        if self._pumping:
            return
        self._pumping = True
        try:
            waiting = self.waiting
            while waiting and self.state is _VALID:
                if (self.blocking is not None and not self.special_waiting and self.running
                        and not self.info.reentrant):
                    break  # (a reentrant class starts every request, those that queued
                    # while it activated too)
                msg: Message | None = None
                deadlocked = False
                for i, candidate in enumerate(waiting):
                    try:
                        ok = self._may_invoke(candidate)
                    except DeadlockError as exc:
                        del waiting[i]
                        self.special_waiting -= 1  # only chained messages get here
                        self._deliver(candidate, False, exc)
                        deadlocked = True
                        break
                    if ok:
                        msg = candidate
                        del waiting[i]
                        break
                if msg is None and not deadlocked:
                    break
                if self.blocked:
                    self._refill()
                if msg is None:
                    continue
                if self._is_special(msg):
                    self.special_waiting -= 1
                self._start(msg, False)
        finally:
            self._pumping = False

    def _is_self_call(self, msg: Message) -> bool:
        chain = msg.chain
        return (
            msg.invoke is not None
            or bool(msg.flags & FLAG_SELF_CALL)
            or (bool(chain) and chain[-1][1] in self.running)
        )

    def _overflow(self, msg: Message, wait: bool) -> asyncio.Future[None] | None:
        """Apply the overflow policy to a message that finds the mailbox full."""
        if msg.direction is _ONE_WAY:
            policy = self.policy
            if policy is OverflowPolicy.REJECT:
                self.rejected += 1
                raise MailboxFullError(
                    f"mailbox of {self.name} is full ({self.capacity} messages); "
                    "one-way message rejected (policy 'reject')"
                )
            if policy is OverflowPolicy.DROP_NEWEST:
                self.dropped_newest += 1
                reply = msg.reply
                if reply is not None:  # its sender's count of it ends (a gateway's)
                    reply(True, None)
                return None
            if policy is OverflowPolicy.DROP_OLDEST:
                old = self.waiting.popleft()
                if self._is_special(old):
                    self.special_waiting -= 1
                self.dropped_oldest += 1
                self._deliver(
                    old,
                    False,
                    MailboxFullError(
                        f"mailbox of {self.name} is full ({self.capacity} messages); the "
                        "oldest message was dropped (policy 'drop_oldest')"
                    ),
                )
                self.waiting.append(msg)
                if self._is_special(msg):
                    self.special_waiting += 1
                return None
        sender = getattr(msg, "sender", None)
        if (sender is None and msg.flags & FLAG_FROM_CLIENT
                and len(self.blocked) >= MAX_FORWARDED_BLOCKED):
            self.rejected += 1
            raise MailboxFullError(
                f"mailbox of {self.name} is full ({self.capacity} messages) and "
                f"{len(self.blocked)} requests wait for room: a client's request forwarded by "
                "another silo is refused (retry later)"
            )
        self.suspended += 1
        room = asyncio.get_running_loop().create_future() if wait else None
        self.blocked.append((msg, room))
        if self.silo.diagnostics.listening:
            self._report_queued(msg, True)
        return room

    def _report_queued(self, msg: Message, blocked: bool) -> None:
        self.silo.diagnostics.emit(RequestQueued(
            silo=self.silo.name, grain_id=msg.target, method=msg.method, blocked=blocked,
            queued=len(self.waiting), blocked_senders=len(self.blocked),
        ))

    def _refill(self) -> None:
        blocked = self.blocked
        waiting = self.waiting
        while blocked and len(waiting) < self.capacity:
            msg, room = blocked.popleft()
            waiting.append(msg)
            if self._is_special(msg):
                self.special_waiting += 1
            if room is not None and not room.done():
                room.set_result(None)

    def _take_pending(self) -> list[Message]:
        """Empty the mailbox (waiting and blocked messages, releasing blocked senders)."""
        pending = list(self.waiting) + [m for m, _ in self.blocked]
        self._release_blocked()
        self.waiting.clear()
        return pending

    def _release_blocked(self) -> None:
        """Empty ``blocked``: wake the senders that wait for room."""
        for _, room in self.blocked:
            if room is not None and not room.done():
                room.set_result(None)
        self.blocked.clear()

    def _deliver(self, msg: Message, ok: bool, value: Any) -> None:
        reply = msg.reply
        if reply is not None:
            reply(ok, value)
        elif not ok and msg.invoke is None:
            self.silo.log.warning(
                "one_way_call_failed", grain=self.name, method=msg.method, error=repr(value)
            )
