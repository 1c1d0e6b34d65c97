"""Prober and Gossiper: what membership needs from the silo-to-silo transport.

The membership service never opens a connection itself. The transport implements these two
small protocols and answers the matching requests of other silos by calling the service:

===========================================  ==============================================
this silo calls (outgoing)                   the other silo's transport calls (incoming)
===========================================  ==============================================
``prober.probe(target, timeout)``            ``service.handle_probe()`` -> bool
``prober.probe_indirect(via, target, t)``    ``await service.handle_indirect_probe(target, t)``
``gossiper.gossip(silo, version)``           ``await service.on_gossip(version)``
===========================================  ==============================================

``orleanspy.testing`` style fakes (a dict of reachable silos) implement them in tests.
"""

from __future__ import annotations

from typing import Protocol

from orleanspy.ids import SiloAddress

__all__ = ["Gossiper", "Prober"]


class Prober(Protocol):
    """Pings other silos. Implementations must not raise for an unreachable silo."""

    async def probe(self, silo: SiloAddress, timeout: float) -> bool:
        """True if ``silo`` answered a ping within ``timeout`` seconds.

        The answer must come from the silo's membership service (``handle_probe``), over the
        ordinary silo-to-silo connection, so that a silo whose process lives but whose
        messaging is stuck is seen as unreachable.
        """
        ...

    async def probe_indirect(
        self, intermediary: SiloAddress, target: SiloAddress, timeout: float
    ) -> bool | None:
        """Ask ``intermediary`` to probe ``target`` (``handle_indirect_probe`` over there).

        Returns True if the intermediary reached the target, False if it asked and got no
        answer, None if the intermediary itself could not be asked in ``timeout`` seconds
        (the result then says nothing about the target and casts no vote).
        """
        ...


class Gossiper(Protocol):
    """Tells other silos that the table changed, so they refresh before their next period."""

    async def gossip(self, silo: SiloAddress, version: int) -> None:
        """Best effort: deliver "the table is at ``version``" to ``silo`` (may raise)."""
        ...
