"""Admission: may a message start now on an activation, or must it queue?

Rationale. The rules follow Orleans' ``MayInvokeRequest`` (see docs/architecture.md):
nothing running → run; always-interleave, or admitted by the class's interleave predicate
(``@may_interleave``) → run; no blocking request → run; read-only
with a read-only blocking request → run; a call chain that passes through a running request
of this activation → run if call-chain reentrancy is allowed, else ``DeadlockError`` if that
request is the blocking one; reentrant class → run; otherwise queue.

``Admission`` is a base of ``Activation`` (a slotted class chain rather than a separate
object, so that the turn path pays no extra attribute hop): it owns the running requests and
the blocking one, and decides; the activation starts the turns.

The interleave predicate is asked once per message, where the activation is busy (or not
yet valid) and the message would otherwise be checked against the rules
(``_admissible_now``): an idle activation starts a request without asking, and a class
without a predicate pays one ``None`` test there. Its answer is kept in the message's flags
(``FLAG_MAY_INTERLEAVE`` / ``FLAG_INTERLEAVE_REFUSED``); an admitted request still holds
back the requests that the predicate refuses, like any request, once it is the oldest
running. A predicate that raises fails the message with its error, as Orleans does. Timer
ticks are not asked (their ``interleave=`` decides).
"""

from __future__ import annotations

from collections import deque
from types import MappingProxyType
from typing import Any, Final

from orleanspy.errors import DeadlockError
from orleanspy.grains.interface import GrainClassInfo
from orleanspy.messaging.message import (
    FLAG_ALWAYS_INTERLEAVE,
    FLAG_INTERLEAVE_REFUSED,
    FLAG_MAY_INTERLEAVE,
    FLAG_READ_ONLY,
    Direction,
    Message,
)
from orleanspy.runtime.activation_state import ActivationState

__all__ = ["Admission"]

# Enum members read per message: as module constants (see runtime/turns.py).
_VALID: Final = ActivationState.VALID
_DEACTIVATING: Final = ActivationState.DEACTIVATING

_INTERLEAVE_MASK: Final = FLAG_ALWAYS_INTERLEAVE | FLAG_READ_ONLY | FLAG_MAY_INTERLEAVE
#: flags that admit a message whatever runs
_ADMIT_MASK: Final = FLAG_ALWAYS_INTERLEAVE | FLAG_MAY_INTERLEAVE
#: flags that make asking the interleave predicate pointless (or say it was asked)
_DECIDED_MASK: Final = _ADMIT_MASK | FLAG_INTERLEAVE_REFUSED
_NO_KWARGS: Final[MappingProxyType[str, Any]] = MappingProxyType({})


class Admission:
    """The admission rules of one activation."""

    __slots__ = ("blocking", "running", "special_waiting")

    # Kept by the activation (and its mailbox); read here.
    info: GrainClassInfo
    name: str
    state: ActivationState
    waiting: deque[Message]

    def __init__(self) -> None:
        #: Requests running now, by message id.
        self.running: dict[int, Message] = {}
        #: The running request that holds back others (None: nothing blocks).
        self.blocking: Message | None = None
        #: Queued messages that may interleave with a blocking request (or carry a chain).
        self.special_waiting = 0

    def _may_invoke(self, msg: Message) -> bool:
        """Orleans' admission rules, plus fail-fast deadlock detection on call chains."""
        running = self.running
        if not running or msg.flags & _ADMIT_MASK:
            return True
        blocking = self.blocking
        if blocking is None or self.info.reentrant:
            return True
        if msg.flags & FLAG_READ_ONLY and blocking.flags & FLAG_READ_ONLY:
            return True
        if msg.chain:
            ccr = self.info.call_chain_reentrant
            for entry in msg.chain:
                if entry[1] in running:
                    if ccr or entry[2]:
                        return True
                    if entry[1] == blocking.id and msg.direction is Direction.REQUEST:
                        chain = (*(e[0] for e in msg.chain), self.name)
                        raise DeadlockError(
                            "deadlock: call cycle " + " -> ".join(chain) + " would wait on "
                            f"itself ({self.name} is busy with the request that made this "
                            "call); mark the class @reentrant or @call_chain_reentrant, the "
                            "method @always_interleave, or call inside "
                            "allow_call_chain_reentrancy()",
                            chain,
                        )
        return False

    def _ask_predicate(self, msg: Message) -> None:
        """Ask the class's interleave predicate about ``msg`` once; keep the answer."""
        predicate = self.info.may_interleave
        if predicate is None or msg.invoke is not None:
            return
        if predicate(msg.method, msg.args, msg.kwargs or _NO_KWARGS):
            msg.flags |= FLAG_MAY_INTERLEAVE
        else:
            msg.flags |= FLAG_INTERLEAVE_REFUSED

    def _is_special(self, msg: Message) -> bool:
        """May this message start (or be found deadlocked) while a blocking request runs?"""
        return bool(msg.flags & _INTERLEAVE_MASK or msg.chain)

    def _admissible_now(self, msg: Message) -> bool:
        """May ``msg`` start now, ahead of anything queued? (Raises ``DeadlockError``, or
        what the class's interleave predicate raised.)"""
        if self.info.may_interleave is not None and not msg.flags & _DECIDED_MASK:
            self._ask_predicate(msg)
        if self.state is not _VALID:
            # While deactivating, calls made by a running request (reentrant, always-
            # interleave or call-chain) still get in; fresh requests wait for redispatch.
            if (
                self.state is _DEACTIVATING
                and self.running
                and any(e[1] in self.running for e in msg.chain)
            ):
                return self._may_invoke(msg)
            return False
        if not self.waiting:
            return self._may_invoke(msg)
        # Others wait because a blocking request runs; only a message that may interleave
        # with it passes them (and a chained request is checked for a cycle).
        if self.running and self._is_special(msg):
            return self._may_invoke(msg)
        return False

    def _recompute_blocking(self) -> None:
        best: Message | None = None
        for m in self.running.values():
            if m.flags & FLAG_ALWAYS_INTERLEAVE:
                continue
            if best is None or (best.flags & FLAG_READ_ONLY and not m.flags & FLAG_READ_ONLY):
                best = m
        self.blocking = best
