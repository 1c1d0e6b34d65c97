"""GrainLocator: where a grain lives and how a message reaches it.

The dispatcher and the catalog ask the silo's locator; they never look for a cluster. A
lone silo uses ``LocalLocator`` (every grain lives here). A clustered silo uses the cluster
runtime (``orleanspy.cluster.runtime.ClusterRuntime``: directory, placement, transport),
which the hosting layer hands to the silo.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from orleanspy.errors import MessageRejectedError, SiloUnavailableError
from orleanspy.grains.host import ActivationHandle
from orleanspy.grains.interface import GrainClassInfo
from orleanspy.ids import GrainId, SiloAddress
from orleanspy.messaging.message import Message
from orleanspy.runtime.host import SiloHost

__all__ = [
    "GrainLocator",
    "LocalHost",
    "LocalLocator",
    "RequestForwarder",
    "fenced_error",
    "forwarding_failed",
]


def fenced_error(silo: str) -> SiloUnavailableError:
    """The error of a request that reached a silo which cannot confirm it is still a member
    of its cluster (paused, cut off from the membership table) or was declared dead."""
    return SiloUnavailableError(
        f"silo {silo} cannot confirm that it is still a member of the cluster (it was paused "
        "or cannot reach the membership table) and serves nothing until it can; call "
        "another silo"
    )


def forwarding_failed(msg: Message, limit: int) -> MessageRejectedError:
    """The error of a message re-dispatched more than ``limit`` times (Orleans' "forwarding
    failed"): its activation kept going away before the message reached it."""
    return MessageRejectedError(
        f"forwarding failed: {msg.target}.{msg.method} was forwarded {limit} times without "
        "reaching an activation (each one deactivated first, or the cluster is changing; "
        "max_forward_count)",
        "forward_limit",
    )


class RequestForwarder(Protocol):
    """A connection to another silo that a gateway sends a client's request on as it came
    (``GrainLocator.connection_for``)."""

    def send_request(self, reply: Callable[[bool, Any], None], type_name: str,
                     key: str | int, method: str, timeout: float | None, body: bytes) -> int:
        """Send the request; its id on this connection (for ``send_cancel``)."""

    def send_cancel(self, corr: int) -> None:
        """The request's caller gave up on it."""


class GrainLocator(Protocol):
    """Routing decisions of one silo."""

    #: True when a grain not active here may only be created here (no other silos): the
    #: dispatcher then creates it inline instead of routing the message.
    local_only: bool

    def route(self, msg: Message, *, forwarded: bool = False,
              local_origin: bool = False) -> None:
        """Deliver ``msg`` for a grain not active here (or, ``forwarded``, one whose
        activation went away with the message queued); errors go to ``msg.reply``."""

    def uses_directory(self, info: GrainClassInfo) -> bool:
        """Must activations of this class register in a directory before they run?"""

    async def register_activation(self, act: ActivationHandle) -> SiloAddress | None:
        """Register ``act``; the silo of the activation that won instead, else None."""

    def activation_removed(self, act: ActivationHandle) -> None:
        """``act`` left the catalog (its directory entry goes)."""

    def forward(self, msg: Message, silo: SiloAddress) -> None:
        """Send a message that reached a duplicate activation to the winner's silo."""

    def connection_for(self, gid: GrainId) -> RequestForwarder | None:
        """The connection to send a gateway client's request for ``gid`` (not active here)
        on as it came, if routing would send it to another silo at once; else None."""


class _Enqueues(Protocol):
    def enqueue(self, msg: Message) -> object: ...


class _Creates(Protocol):
    def get_or_create(self, grain_id: GrainId) -> _Enqueues: ...


class _DeliversHere(Protocol):
    def deliver_here(self, msg: Message) -> None: ...


class LocalHost(SiloHost, Protocol):
    """What a lone silo's locator uses: the silo's catalog and dispatcher (which are
    built after the locator, so they are read on use)."""

    @property
    def catalog(self) -> _Creates: ...

    @property
    def dispatcher(self) -> _DeliversHere: ...


class LocalLocator:
    """The locator of a lone silo: every grain is activated here."""

    __slots__ = ("_silo",)

    local_only = True

    def __init__(self, silo: LocalHost) -> None:
        self._silo = silo

    def route(self, msg: Message, *, forwarded: bool = False,
              local_origin: bool = False) -> None:
        silo = self._silo
        if not forwarded:
            silo.dispatcher.deliver_here(msg)
            return
        hops = msg.hops + 1
        limit = silo.options.max_forward_count
        if hops > limit:
            error = forwarding_failed(msg, limit)
            if msg.reply is not None:
                msg.reply(False, error)
            else:
                silo.log.warning("one_way_call_failed", grain=str(msg.target),
                                 method=msg.method, error=repr(error))
            return
        msg.hops = hops
        if silo.stopping:
            if msg.reply is not None:
                msg.reply(False, SiloUnavailableError(
                    f"silo {silo.name} is shutting down; {msg.target} was deactivated"
                ))
            return
        try:
            silo.catalog.get_or_create(msg.target).enqueue(msg)
        except Exception as exc:
            if msg.reply is not None:
                msg.reply(False, exc)

    def uses_directory(self, info: GrainClassInfo) -> bool:
        return False

    async def register_activation(self, act: ActivationHandle) -> SiloAddress | None:
        return None

    def activation_removed(self, act: ActivationHandle) -> None:
        pass

    def connection_for(self, gid: GrainId) -> RequestForwarder | None:
        return None

    def forward(self, msg: Message, silo: SiloAddress) -> None:
        raise RuntimeError(f"a lone silo has no other silo to forward {msg.target} to ({silo})")
