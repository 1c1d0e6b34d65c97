"""FailureDetector: probes the silos this silo monitors and reports the ones that keep missing.

Why it is built this way (Orleans ``ClusterHealthMonitor`` / ``SiloHealthMonitor``, SWIM):

* Each active silo probes only a few others (``num_probed_silos``, chosen on seeded hash rings,
  see ``monitoring.py``), plus any silo that others already suspect or whose I-am-alive is
  stale, so the probe load per silo stays constant as the cluster grows while a suspect
  still gets votes from more than its ring neighbours.
* A missed probe proves little: the target may be slow, or only the link between the two may
  be broken. So after ``num_missed_probes_limit - 1`` misses in a row the detector asks another
  healthy active silo to probe the target (an *indirect* probe). If that silo reaches it, the
  suspicion is dropped and the count restarts: a broken link does not kill a live silo. If it
  cannot reach it either, both silos vote at once, which with the default two required votes
  is a death declaration. If the intermediary could not be asked at all, its silence says
  nothing, and this silo votes alone after ``num_missed_probes_limit`` misses.
* The detector never writes to the table itself; it calls ``suspect(target, also)``, which the
  membership service serialises and turns into compare-and-swap writes.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any, final

from orleanspy._util.clock import Clock
from orleanspy.cluster.membership.entry import SiloStatus
from orleanspy.cluster.membership.monitoring import monitored_silos
from orleanspy.cluster.membership.options import MembershipOptions
from orleanspy.cluster.membership.prober import Prober
from orleanspy.cluster.membership.snapshot import MembershipSnapshot
from orleanspy.cluster.membership.voting import fresh_votes, is_stale
from orleanspy.ids import SiloAddress

__all__ = ["PROBED_STATUSES", "FailureDetector"]

#: Statuses of the silos that are probed (a silo in them can still crash).
PROBED_STATUSES = frozenset({SiloStatus.JOINING, SiloStatus.ACTIVE, SiloStatus.SHUTTING_DOWN})

#: The intermediary of an indirect probe gets this share of the probe timeout, so that its
#: answer can travel back before the asking silo's own timeout.
_INDIRECT_TIMEOUT_SHARE = 0.5

Suspect = Callable[[SiloAddress, SiloAddress | None], Awaitable[Any]]


@final
class FailureDetector:
    """The probing half of one silo's membership service.

    Args:
        me: this silo.
        prober: the transport's probes.
        options, clock: detection settings; wall time for staleness and vote freshness.
        suspect: ``await suspect(target, also)`` votes ``target`` dead (with ``also``'s vote).
        stopping: True once the service stops; checked after every await.
        rng: chooses intermediaries.
        log: the service's bound logger.
    """

    __slots__ = (
        "_clock", "_log", "_missed", "_monitored", "_options", "_prober", "_rng", "_snapshot",
        "_stopping", "_suspect", "indirect_probes", "me", "probes_failed", "probes_sent",
    )

    def __init__(
        self,
        me: SiloAddress,
        prober: Prober,
        options: MembershipOptions,
        clock: Clock,
        suspect: Suspect,
        stopping: Callable[[], bool],
        rng: random.Random,
        log: Any,
    ) -> None:
        self.me = me
        self._prober = prober
        self._options = options
        self._clock = clock
        self._suspect = suspect
        self._stopping = stopping
        self._rng = rng
        self._log = log
        self._snapshot = MembershipSnapshot.empty()
        self._monitored: tuple[SiloAddress, ...] = ()
        self._missed: dict[SiloAddress, int] = {}
        self.probes_sent = 0
        self.probes_failed = 0
        self.indirect_probes = 0

    @property
    def monitored(self) -> tuple[SiloAddress, ...]:
        """The silos probed in each round: ring successors first, then suspects."""
        return self._monitored

    def update(self, snapshot: MembershipSnapshot) -> None:
        """Recompute the monitored silos from ``snapshot``; forget misses of the others."""
        self._snapshot = snapshot
        options = self._options
        now = self._clock.time()
        candidates = {
            silo: entry
            for silo, entry in snapshot.entries.items()
            if silo != self.me and entry.status in PROBED_STATUSES
        }
        ring = monitored_silos(self.me, candidates, options.num_probed_silos)
        extra = sorted(
            (
                silo
                for silo, entry in candidates.items()
                if silo not in ring
                and (
                    fresh_votes(entry.suspect_votes, now, options.death_vote_expiration_timeout)
                    or is_stale(entry, now, options.i_am_alive_expiration)
                )
            ),
            key=str,
        )
        self._monitored = (*ring, *extra)
        for silo in [s for s in self._missed if s not in self._monitored]:
            del self._missed[silo]

    async def probe(self, target: SiloAddress, timeout: float | None = None) -> bool:
        """One direct probe: True if ``target`` answered within ``timeout`` (default: the
        probe timeout). Transport errors count as no answer."""
        timeout = self._options.probe_timeout if timeout is None else timeout
        self.probes_sent += 1
        try:
            async with self._clock.timeout(timeout):
                ok = await self._prober.probe(target, timeout)
        except Exception as exc:  # a timeout or a transport error: not reached
            self._log.debug("membership_probe_error", target=str(target), error=repr(exc))
            ok = False
        if not ok:
            self.probes_failed += 1
        return ok

    async def unreachable_active(self, snapshot: MembershipSnapshot) -> list[str]:
        """Probe once, concurrently, every ACTIVE silo of ``snapshot`` (but this one) whose
        I-am-alive is fresh; return those that did not answer, sorted (a joining silo must
        reach them all)."""
        now = self._clock.time()
        expiration = self._options.i_am_alive_expiration
        targets = [
            silo
            for silo, entry in snapshot.entries.items()
            if silo != self.me
            and entry.status is SiloStatus.ACTIVE
            and not is_stale(entry, now, expiration)
        ]
        results = await asyncio.gather(*(self.probe(t) for t in targets))
        return sorted(str(t) for t, ok in zip(targets, results, strict=True) if not ok)

    async def probe_round(self) -> None:
        """Probe every monitored silo once, concurrently."""
        targets = self._monitored
        if targets:
            await asyncio.gather(*(self._check(target) for target in targets))

    async def _check(self, target: SiloAddress) -> None:
        ok = await self.probe(target)
        if self._stopping() or target not in self._monitored:
            return
        if ok:
            if self._missed.pop(target, 0):
                self._log.info("membership_probe_answered_again", target=str(target))
            return
        missed = self._missed[target] = self._missed.get(target, 0) + 1
        self._log.warning("membership_probe_missed", target=str(target), missed=missed)
        limit = self._options.num_missed_probes_limit
        if self._options.enable_indirect_probes and missed >= limit - 1:
            via = self._intermediary(target)
            if via is not None:
                reached = await self._probe_indirect(via, target)
                if self._stopping():
                    return
                if reached is True:
                    self._missed[target] = 0
                    self._log.info("membership_indirect_probe_answered", target=str(target),
                                   via=str(via))
                    return
                if reached is False:
                    await self._suspect(target, via)
                    return
        if missed >= limit:
            await self._suspect(target, None)

    def _intermediary(self, target: SiloAddress) -> SiloAddress | None:
        options = self._options
        now = self._clock.time()
        choices = sorted(
            (
                silo
                for silo, entry in self._snapshot.entries.items()
                if silo not in (self.me, target)
                and entry.status is SiloStatus.ACTIVE
                and not is_stale(entry, now, options.i_am_alive_expiration)
                and not fresh_votes(entry.suspect_votes, now,
                                    options.death_vote_expiration_timeout)
            ),
            key=str,
        )
        return self._rng.choice(choices) if choices else None

    async def _probe_indirect(self, via: SiloAddress, target: SiloAddress) -> bool | None:
        timeout = self._options.probe_timeout
        self.indirect_probes += 1
        try:
            async with self._clock.timeout(timeout):
                return await self._prober.probe_indirect(
                    via, target, timeout * _INDIRECT_TIMEOUT_SHARE
                )
        except Exception as exc:
            self._log.debug("membership_indirect_probe_error", target=str(target),
                            via=str(via), error=repr(exc))
            return None
