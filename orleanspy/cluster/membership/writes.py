"""TableWriter: the compare-and-swap writes one silo makes to the membership table.

Three writes, each a loop of read, compute, swap on the row's etag and the table version:

* the joining row (declaring older generations of the same endpoint DEAD first),
* this silo's own status (ACTIVE, SHUTTING_DOWN, DEAD),
* a death vote against another silo, which writes DEAD when it brings the fresh votes to
  the required count, so that exactly one write declares a death.

A failed swap is another silo's successful write, so each loop re-reads and retries, at most
``MAX_WRITE_ATTEMPTS`` times (a bound on contention, not on time).

The writer holds no state of the service: it reads through the service's ``read_all`` (which
publishes what it reads) and returns what it wrote, and the service records its own status
and tells the cluster (refresh, gossip) after each write. The service casts one vote at a
time (under its lock); its own row is written by its lifecycle steps, one after another.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, final

from orleanspy._util.clock import Clock
from orleanspy.cluster.membership.entry import MembershipEntry, MembershipTableData, SiloStatus
from orleanspy.cluster.membership.options import MembershipOptions
from orleanspy.cluster.membership.table import MembershipTable
from orleanspy.cluster.membership.voting import add_vote, fresh_votes, votes_required
from orleanspy.errors import MembershipError
from orleanspy.ids import SiloAddress

__all__ = ["MAX_WRITE_ATTEMPTS", "TableWriter", "VoteOutcome", "declared_dead"]

_JOINING, _DEAD = SiloStatus.JOINING, SiloStatus.DEAD

#: Compare-and-swap attempts of one write before giving up (each failure is another
#: silo's successful write, so this bounds contention, not time).
MAX_WRITE_ATTEMPTS = 20


class VoteOutcome(enum.Enum):
    """What ``TableWriter.vote`` did."""

    WRITTEN = "written"  #: the vote (and perhaps the death) is in the table
    ALREADY_DEAD = "already_dead"  #: the target was DEAD already: nothing to write
    NOT_WRITTEN = "not_written"  #: stopping, the row is gone, or too many conflicts


@final
class TableWriter:
    """The writes of silo ``silo`` to ``table``.

    Args:
        table, silo, options, clock: as given to the membership service.
        read_all: the service's table read (it publishes the rows it reads).
        stopping: True once the service stops; the loops give up then.
        silo_name, host_name, gateway_port: written into this silo's row.
        log: the service's bound logger.
    """

    __slots__ = (
        "_clock", "_gateway_port", "_host_name", "_log", "_options", "_read_all", "_silo_name",
        "_stopping", "silo", "silos_declared_dead", "table", "votes_cast",
    )

    def __init__(
        self,
        table: MembershipTable,
        silo: SiloAddress,
        options: MembershipOptions,
        clock: Clock,
        read_all: Callable[[], Awaitable[MembershipTableData]],
        stopping: Callable[[], bool],
        *,
        silo_name: str,
        host_name: str,
        gateway_port: int | None,
        log: Any,
    ) -> None:
        self.table = table
        self.silo = silo
        self._options = options
        self._clock = clock
        self._read_all = read_all
        self._stopping = stopping
        self._silo_name = silo_name
        self._host_name = host_name
        self._gateway_port = gateway_port
        self._log = log
        self.votes_cast = 0
        self.silos_declared_dead = 0

    def check_join_deadline(self, deadline: float, what: str) -> None:
        """Raise ``MembershipError`` if the service stops or the join ``deadline`` (monotonic
        time) has passed; ``what`` names the step that did not finish in time."""
        if self._stopping():
            raise MembershipError(f"{self.silo} stopped while joining the cluster")
        if self._clock.monotonic() >= deadline:
            raise MembershipError(
                f"{self.silo} could not {what} within {self._options.max_join_attempt_time} s "
                "(MembershipOptions.max_join_attempt_time)"
            )

    async def joining_row(self, deadline: float, start_time: float) -> int:
        """Write this silo's row as JOINING, after declaring older generations of its endpoint
        DEAD. Returns the table version the row was written at.

        Raises:
            MembershipError: a newer generation of this endpoint is in the table, this
                address is already DEAD, the service stopped, or ``deadline`` passed.
        """
        me = self.silo
        while True:
            data = await self._read_all()
            older: tuple[MembershipEntry, str] | None = None
            for entry, etag in data.rows:
                other = entry.silo
                if (other.host, other.port) != (me.host, me.port) or other == me:
                    continue
                if entry.status.is_gone:
                    continue
                if other.generation > me.generation:
                    raise MembershipError(
                        f"{other}, a newer generation of this endpoint, is {entry.status.value} "
                        f"in the membership table: {me} is an outdated restart and must not "
                        "join; start it with a higher generation"
                    )
                older = (entry, etag)
            if older is not None:
                entry, etag = older
                dead = declared_dead(entry, (me,), self._clock.time())
                if await self.table.update_row(dead, etag, data.version):
                    self._log.info("membership_old_generation_declared_dead",
                                   target=str(entry.silo))
                    continue
            else:
                mine = data.get(me)
                if mine is not None and mine[0].status.is_gone:
                    raise MembershipError(
                        f"{me} is already DEAD in the membership table, and a dead address "
                        "never comes back: restart the silo with a new generation"
                    )
                entry = MembershipEntry(
                    silo=me,
                    status=_JOINING,
                    silo_name=self._silo_name,
                    host_name=self._host_name,
                    gateway_port=self._gateway_port,
                    start_time=start_time,
                    i_am_alive_time=self._clock.time(),
                )
                if mine is None:
                    written = await self.table.insert_row(entry, data.version)
                else:
                    written = await self.table.update_row(entry, mine[1], data.version)
                if written:
                    return data.version.version + 1
            self.check_join_deadline(deadline, "write its membership row")
            await asyncio.sleep(0)

    async def own_status(self, status: SiloStatus) -> bool:
        """Write ``status`` into this silo's row: True if written, False if the row already
        holds it.

        Raises:
            MembershipError: the row is gone or DEAD (and ``status`` is not DEAD), or
                ``MAX_WRITE_ATTEMPTS`` swaps in a row failed.
        """
        for _ in range(MAX_WRITE_ATTEMPTS):
            data = await self.table.read_row(self.silo)
            row = data.get(self.silo)
            if row is None or (row[0].status.is_gone and not status.is_gone):
                await self._read_all()  # publishes the truth, and finds this silo dead
                raise MembershipError(
                    f"{self.silo} cannot become {status.value}: it was declared dead"
                )
            entry, etag = row
            if entry.status is status:
                return False
            new = dataclasses.replace(entry, status=status, i_am_alive_time=self._clock.time())
            if status is _DEAD:
                new = declared_dead(new, (self.silo,), new.i_am_alive_time)
            if await self.table.update_row(new, etag, data.version):
                self._log.info("membership_status_written", status=status.value)
                return True
            await asyncio.sleep(0)
        raise MembershipError(
            f"{self.silo} could not write its status {status.value}: "
            f"{MAX_WRITE_ATTEMPTS} write conflicts in a row"
        )

    async def vote(self, silo: SiloAddress, also: SiloAddress | None) -> VoteOutcome:
        """Add this silo's vote (and ``also``'s) against ``silo``; write DEAD if that brings
        its fresh votes to the required count."""
        options = self._options
        expiration = options.death_vote_expiration_timeout
        for _ in range(MAX_WRITE_ATTEMPTS):
            data = await self._read_all()
            row = data.get(silo)
            if self._stopping() or row is None:
                return VoteOutcome.NOT_WRITTEN
            entry, etag = row
            if entry.status.is_gone:
                return VoteOutcome.ALREADY_DEAD
            now = self._clock.time()
            votes = add_vote(entry.suspect_votes, self.silo, now, expiration=expiration)
            if also is not None:
                votes = add_vote(votes, also, now, expiration=expiration)
            required = votes_required(
                data.entries(), now, votes=options.num_votes_for_death_declaration,
                i_am_alive_expiration=options.i_am_alive_expiration,
            )
            dead = len(fresh_votes(votes, now, expiration)) >= required
            new = dataclasses.replace(entry, suspect_votes=votes)
            if dead:
                new = declared_dead(new, [v.voter for v in fresh_votes(votes, now, expiration)],
                                    now)
            if await self.table.update_row(new, etag, data.version):
                self.votes_cast += 1 if also is None else 2
                voters = [str(v.voter) for v in votes]
                if dead:
                    self.silos_declared_dead += 1
                    self._log.warning("membership_silo_declared_dead", target=str(silo),
                                      voters=voters)
                else:
                    self._log.warning("membership_silo_suspected", target=str(silo),
                                      voters=voters, required=required)
                return VoteOutcome.WRITTEN
            await asyncio.sleep(0)
        self._log.warning("membership_vote_not_written", target=str(silo))
        return VoteOutcome.NOT_WRITTEN


def declared_dead(entry: MembershipEntry, by: Iterable[SiloAddress],
                  now: float) -> MembershipEntry:
    """``entry`` written DEAD at ``now`` by the silos ``by``."""
    return dataclasses.replace(entry, status=_DEAD, declared_dead_at=now,
                               declared_dead_by=tuple(dict.fromkeys(by)))
