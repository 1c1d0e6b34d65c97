"""Message: one request, one-way call or response, as it travels from caller to activation.

A request is created by a grain reference (or a timer/reminder), routed by the dispatcher and
queued in an activation's mailbox. ``reply`` decides where the result goes: a local Future, a
connection back to a remote caller, or nowhere (one-way).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from enum import IntEnum
from typing import Any, Final, Protocol

from orleanspy.ids import GrainId

__all__ = ["CallChainEntry", "Direction", "Message", "ResultKind", "Sender", "new_message_id"]

# Ids are unique across processes: a random 30-bit process prefix and a 33-bit counter.
_BASE: Final = (int.from_bytes(os.urandom(4), "little") & 0x3FFFFFFF) << 33
_counter = itertools.count(_BASE + 1)
new_message_id: Final = _counter.__next__
"""A new id: unique in this process, and across processes with overwhelming probability."""


class Direction(IntEnum):
    REQUEST = 0
    ONE_WAY = 1
    RESPONSE = 2


class ResultKind(IntEnum):
    OK = 0
    ERROR = 1


# A call-chain entry: (grain id text, id of the request running in that grain, may re-enter).
CallChainEntry = tuple[str, int, bool]

# Message flags
FLAG_ALWAYS_INTERLEAVE: Final = 1
FLAG_READ_ONLY: Final = 2
FLAG_SUPPRESS_KEEP_ALIVE: Final = 4
FLAG_SELF_CALL: Final = 8
#: The request came from a gateway client: only methods open to clients may run it.
FLAG_FROM_CLIENT: Final = 16
#: The receiving class's interleave predicate (``@may_interleave``) admitted the request.
FLAG_MAY_INTERLEAVE: Final = 32
#: The receiving class's interleave predicate refused the request (asked once per request).
FLAG_INTERLEAVE_REFUSED: Final = 64
#: The method is ``@cancellable``: its running turn is cancelled when its caller gives up.
FLAG_CANCELLABLE: Final = 128
#: Its caller gave up on it (a cancel): it never starts.
FLAG_CANCELLED: Final = 256
#: The method is an async generator: its call answers with its first items and a token to
#: pull the rest with (``runtime.streamed_calls``).
FLAG_STREAMED: Final = 512
#: The deadline of a cancelled request: long past on any monotonic clock, and not 0 (none).
LONG_AGO: Final = 1e-9


class Sender(Protocol):
    """The gateway connection a message was read from. ``bad_frame``: the message's body is
    not acceptable (beyond the decode bound): close the connection, saying why."""

    def bad_frame(self, reason: str) -> None: ...


class Message:
    """A request or one-way call addressed to a grain (or system target)."""

    hops: int
    #: the connection it was read from, on gateway requests only (unset otherwise: read it
    #: with ``getattr(msg, "sender", None)``, off the hot path)
    sender: Sender
    started: float
    #: the activation running it as a turn (set by the activation when the turn starts)
    activation: Any
    #: the Carrier of a turn its local caller's task runs (set only on those)
    runner: Any
    #: ``(connection, id)`` of a request sent on to another silo, where a cancel follows it
    #: (set only on those: read it with ``getattr(msg, "forward", None)``)
    forward: tuple[Any, int]
    #: the message of the turn a ``@cancellable`` turn carries (a local call it awaits in
    #: its own task, on 3.11), or None (set only on those)
    carrying: Message | None

    __slots__ = (
        "activation",
        "args",
        "body",
        "carrying",
        "chain",
        "deadline",
        "direction",
        "flags",
        "forward",
        "hops",
        "id",
        "invoke",
        "kwargs",
        "method",
        "rc",
        "reply",
        "runner",
        "sender",
        "started",
        "target",
        "timeout",
    )

    def __init__(
        self,
        direction: Direction,
        target: GrainId,
        method: str,
        args: tuple[Any, ...] | list[Any],
        kwargs: dict[str, Any] | None,
        chain: tuple[CallChainEntry, ...] = (),
        flags: int = 0,
        timeout: float | None = None,
        msg_id: int | None = None,
    ) -> None:
        self.id = _counter.__next__() if msg_id is None else msg_id
        self.direction = direction
        self.target = target
        self.method = method
        self.args = args
        self.kwargs = kwargs
        self.chain = chain
        self.flags = flags
        self.timeout = timeout
        # When the caller stops waiting, on this process's monotonic clock (0: no deadline):
        # a request still queued then is dropped before it starts.
        self.deadline = 0.0
        # Where the outcome goes: called as reply(ok, value); None for one-way calls, save a
        # gateway client's, whose reply is told once this silo is done with it (its turn
        # ended, it was dropped or failed, or it was written to another silo's connection).
        self.reply: Callable[[bool, Any], None] | None = None
        # A runtime-local callable to invoke instead of a method (timer ticks).
        self.invoke: Callable[[], Any] | None = None
        # Times forwarded between silos.
        self.hops = 0
        # The request context it carries (``grains.request_context``): a dict, or None.
        self.rc: dict[str, Any] | None = None
        # The arguments still encoded (``messaging.frames.encode_body``), as a connection
        # received them: a silo that only routes the message forwards these bytes; the one
        # that runs it decodes them into ``args`` and ``kwargs`` (``frames.open_body``).
        self.body: bytes | None = None
        # ``started`` (perf_counter at the turn's start) is set by the activation that runs
        # it, for its call statistics.

    def __repr__(self) -> str:
        return f"<Message {self.direction.name} {self.target}.{self.method} id={self.id}>"
