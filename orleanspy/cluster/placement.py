"""Placement: which silo creates the activation of a grain that is not active anywhere.

Where it sits: after a directory lookup finds no activation, the calling silo asks the grain
class's strategy (``@placement(...)``, default prefer-local) for a silo and sends the request
there; that silo creates the activation and registers it (the directory arbitrates races).

=====================  ==========================================================================
strategy               choice among the active silos
=====================  ==========================================================================
``prefer_local``       this silo if it is active, else a random one (Orleans' PreferLocal)
``random``             a uniformly random silo
``hash_based``         silo ``hash(grain) mod n`` of the silos sorted by address: every caller
                       picks the same silo for a grain (Orleans' HashBased)
``activation_count``   power of two choices: two random silos, the one with fewer activations
                       (as last published, plus this silo's placements since); Orleans'
                       ActivationCountBased with ChooseOutOf = 2
=====================  ==========================================================================
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, final

from orleanspy.cluster.directory import grain_hash
from orleanspy.grains.interface import PlacementStrategy
from orleanspy.ids import GrainId, SiloAddress
from orleanspy.runtime.identity import SiloIdentity

__all__ = ["PlacementDirector", "PlacementStrategy", "system_target_silo"]


@final
class PlacementDirector:
    """Chooses silos for new activations; ``loads`` holds the activation counts of silos."""

    __slots__ = ("_identity", "_rng", "loads")

    def __init__(self, identity: SiloIdentity, rng: random.Random | None = None) -> None:
        self._identity = identity
        self._rng = rng or random.Random()
        self.loads: dict[SiloAddress, int] = {}

    @property
    def me(self) -> SiloAddress:
        """This silo (its address is bound once the transport listens)."""
        return self._identity.address

    def choose(
        self, strategy: PlacementStrategy, grain_id: GrainId,
        silos: Sequence[SiloAddress], local_ok: bool,
    ) -> SiloAddress:
        """A silo for ``grain_id`` among ``silos`` (sorted; this silo may be absent).

        ``local_ok`` is False while this silo may not take new activations (joining or
        stopping). With no silo to choose from, this silo is the answer.
        """
        if not silos:
            return self.me
        if strategy is PlacementStrategy.PREFER_LOCAL:
            if local_ok and self.me in silos:
                return self.me
            return self._rng.choice(silos)
        if strategy is PlacementStrategy.RANDOM:
            return self._rng.choice(silos)
        if strategy is PlacementStrategy.HASH_BASED:
            return silos[(grain_hash(grain_id) & 0x7FFFFFFF) % len(silos)]
        # ACTIVATION_COUNT: power of two choices.
        if len(silos) == 1:
            chosen = silos[0]
        else:
            a, b = self._rng.sample(list(silos), 2)
            loads = self.loads
            chosen = a if loads.get(a, 0) <= loads.get(b, 0) else b
        # Count the placement at once (Orleans adds the number of silos to damp herding
        # between two load reports; one per placement is exact for this silo's own choices).
        self.loads[chosen] = self.loads.get(chosen, 0) + 1
        return chosen


def system_target_silo(key: Any) -> SiloAddress | None:
    """The silo named by the last element of a system target's key, if any (a system target
    whose key ends with a silo's address, ``host:port@generation``, lives on that silo)."""
    if type(key) is not tuple or not key or type(key[-1]) is not str:
        return None
    host, sep, rest = key[-1].rpartition(":")
    port, at, generation = rest.partition("@")
    if not sep or not at or not port.isdigit() or not generation.isdigit():
        return None
    return SiloAddress(host, int(port), int(generation))
