"""The running turn (contextvars): which activation and request the current code serves.

Grain code runs each turn in its own ``contextvars.Context``; a call made from inside a
turn reads it to build the outgoing call chain (deadlock detection, call-chain reentrancy).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orleanspy.messaging.message import CallChainEntry, Message

__all__ = ["allow_call_chain_reentrancy", "current_turn", "turn_chain"]

# The message of the turn running in this context (its ``activation`` is the grain's), or
# None outside grains.
current_turn: ContextVar[Message | None] = ContextVar("orleanspy_current_turn", default=None)
# True inside allow_call_chain_reentrancy(): calls made may re-enter the calling grain.
reentrancy_scope: ContextVar[bool] = ContextVar("orleanspy_ccr_scope", default=False)


def turn_chain(turn: Message) -> tuple[CallChainEntry, ...]:
    """The call chain an outgoing call made from ``turn`` carries."""
    return (*turn.chain, (turn.activation.name, turn.id, reentrancy_scope.get()))


@contextmanager
def allow_call_chain_reentrancy() -> Iterator[None]:
    """Within this scope, calls from the current grain may call back into it (A→B→A).

    Without it (and without ``@call_chain_reentrant`` on the class) such a cycle fails fast
    with ``DeadlockError``.
    """
    token = reentrancy_scope.set(True)
    try:
        yield
    finally:
        reentrancy_scope.reset(token)
