"""MembershipService: one silo's membership agent and oracle over a shared MembershipTable.

How it works (Orleans' membership protocol, see docs/cluster.md "Membership"):

* Join: write this silo's row as JOINING (declaring older generations of the same endpoint
  DEAD), probe every ACTIVE silo with a recent I-am-alive until all answer (or give up after
  ``max_join_attempt_time``), then write ACTIVE.
* While active: write the I-am-alive time every ``i_am_alive_period``; read the table every
  ``table_refresh_period`` (or at once when another silo gossips a newer version); probe the
  monitored silos every ``probe_period``.
* Failure detection: a silo that misses ``num_missed_probes_limit - 1`` probes in a row is
  probed indirectly through another active silo. If that silo cannot reach it either, both
  vote at once; if it can, the suspicion is dropped. After ``num_missed_probes_limit`` misses
  without an indirect answer this silo votes alone. A vote is a compare-and-swap on the row
  and the table version; the voter that brings the fresh votes to the required count writes
  DEAD in the same swap, so exactly one write declares a death.
* A silo that reads its own row as DEAD (or finds it gone) stops at once and calls
  ``on_declared_dead``: the others have re-homed its work, and it must not keep serving it.
* Leave: SHUTTING_DOWN (``begin_shutdown``), then DEAD (``stop``).

Time comes from the injected ``Clock``: decisions use ``clock.time()`` (wall time, comparable
across processes); loops sleep, and probes and gossip time out, on the same clock. Tests
drive the steps directly (``refresh``, ``probe_round``, ``heartbeat``) or advance a
``FakeClock`` to run the loops.

Longer than most modules (about 560 lines): join, heartbeat, probing, voting and leaving
read and write one view and one row of this silo under one lock; the periodic loops live in
``loops`` and the listeners in ``snapshot``.

Each status change of a silo in this silo's view is emitted as ``SiloStatusChanged`` on the
``diagnostics`` hub (when somebody listens).

Size: this module holds about 550 lines because joining, leaving, voting and reacting to
a table read all change this silo's own row state (status, own version, stopping) under
one protocol; the loops (``loops.py``), the detector (``probing.py``), the vote arithmetic
(``voting.py``) and the snapshot distribution (``snapshot.py``) live apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any, final

from orleanspy._util.clock import Clock, SystemClock
from orleanspy.cluster.membership.entry import MembershipEntry, MembershipTableData, SiloStatus
from orleanspy.cluster.membership.loops import PeriodicSteps
from orleanspy.cluster.membership.options import MembershipOptions
from orleanspy.cluster.membership.prober import Gossiper, Prober
from orleanspy.cluster.membership.probing import PROBED_STATUSES, FailureDetector
from orleanspy.cluster.membership.snapshot import Listener, MembershipSnapshot, SnapshotPublisher
from orleanspy.cluster.membership.table import MembershipTable
from orleanspy.cluster.membership.voting import add_vote, fresh_votes, is_stale, votes_required
from orleanspy.diagnostics import Diagnostics, SiloStatusChanged
from orleanspy.errors import MembershipError
from orleanspy.ids import SiloAddress
from orleanspy.logging import get_logger

__all__ = ["MembershipService", "MembershipStatistics"]

_JOINING, _ACTIVE = SiloStatus.JOINING, SiloStatus.ACTIVE
_SHUTTING_DOWN, _DEAD = SiloStatus.SHUTTING_DOWN, SiloStatus.DEAD

#: Compare-and-swap attempts of one write before giving up (each failure is another
#: silo's successful write, so this bounds contention, not time).
_MAX_WRITE_ATTEMPTS = 20


@dataclass(frozen=True, slots=True)
class MembershipStatistics:
    """Counters of one membership service (dashboard, tests)."""

    status: SiloStatus | None
    version: int
    active_silos: int
    monitored: tuple[SiloAddress, ...]
    probes_sent: int
    probes_failed: int
    indirect_probes: int
    votes_cast: int
    silos_declared_dead: int
    step_failures: int


@final
class MembershipService:
    """Membership of ``silo`` in the cluster whose rows ``table`` holds.

    Args:
        table: the shared table (the service opens it, and never closes it: its owner does).
        silo: this silo's address; its generation tells restarts of one endpoint apart.
        prober: reaches other silos (see ``orleanspy.cluster.membership.prober``).
        options: failure-detection settings.
        clock: wall time for rows, votes and staleness; monotonic time for the join deadline.
        gossiper: tells other silos of this silo's writes (optional: they refresh anyway).
        silo_name, host_name, gateway_port: written into the row for tools and clients.
        on_declared_dead: called once, synchronously, when the table says this silo is dead;
            the host should stop the silo (the service has already stopped probing).
        rng: chooses intermediaries of indirect probes (seed it in tests).
        diagnostics: the silo's event hub (``SiloStatusChanged``).
    """

    def __init__(
        self,
        table: MembershipTable,
        silo: SiloAddress,
        prober: Prober,
        *,
        options: MembershipOptions | None = None,
        clock: Clock | None = None,
        gossiper: Gossiper | None = None,
        silo_name: str = "",
        host_name: str = "",
        gateway_port: int | None = None,
        on_declared_dead: Callable[[], None] | None = None,
        rng: random.Random | None = None,
        diagnostics: Diagnostics | None = None,
    ) -> None:
        self.table = table
        self.silo = silo
        self.options = o = options or MembershipOptions()
        # Frozen options: computed once, read on every message this silo serves.
        self._fence_timeout = max(o.num_missed_probes_limit * o.probe_timeout,
                                  2 * o.table_refresh_period)
        self._gossiper = gossiper
        self._clock = clock or SystemClock()
        self._diagnostics = diagnostics
        self._name = f"{silo.host}:{silo.port}"
        self._silo_name = silo_name
        self._host_name = host_name
        self._gateway_port = gateway_port
        self._on_declared_dead = on_declared_dead
        self._log = get_logger(__name__, silo=str(silo))
        self._detector = FailureDetector(
            silo, prober, self.options, self._clock, self._suspect_for_detector,
            lambda: self._stopping, rng or random.Random(), self._log,
        )
        self._publisher = SnapshotPublisher(self._log)
        self._status: SiloStatus | None = None
        self._own_version = 0  # table version at which this silo's row was written
        self._start_time = 0.0
        self._started = False
        self._stopping = False
        self._stopped = False
        self._declared_dead = False
        #: monotonic time at which the last table read that found this silo alive began
        self.confirmed_at = 0.0
        self._confirming: asyncio.Task[Any] | None = None
        self._stop_lock = asyncio.Lock()
        self._suspect_lock = asyncio.Lock()
        self._loops = PeriodicSteps(self._clock, self._log, lambda: self._stopping,
                                    f"membership-{silo}")
        self._votes_cast = 0
        self._declared = 0

    def __repr__(self) -> str:
        return f"MembershipService({self.silo}, status={self._status})"

    # -- view ------------------------------------------------------------------------------
    @property
    def status(self) -> SiloStatus | None:
        """This silo's status as last written or read (None before ``start``)."""
        return self._status

    @property
    def snapshot(self) -> MembershipSnapshot:
        """The newest snapshot read (``version`` -1 before the first read)."""
        return self._publisher.current

    @property
    def monitored_silos(self) -> tuple[SiloAddress, ...]:
        """The silos this silo probes now."""
        return self._detector.monitored

    @property
    def declared_dead(self) -> bool:
        """True once this silo found itself declared dead (it then stopped itself)."""
        return self._declared_dead

    def updates(self) -> AsyncGenerator[MembershipSnapshot, None]:
        """Snapshots with strictly increasing versions: the current one, then each newer one
        (a slow consumer skips to the newest). Ends after ``stop`` or a declared death."""
        return self._publisher.updates()

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Call ``await listener(snapshot)`` for the current and every newer snapshot, one
        call at a time, in version order. Returns a function that removes the listener.

        A listener that raises is logged and keeps receiving. Listeners run in tasks of the
        service and are cancelled by ``stop``.
        """
        return self._publisher.add_listener(listener)

    async def wait_for(
        self, predicate: Callable[[MembershipSnapshot], bool], timeout: float | None = None
    ) -> MembershipSnapshot:
        """The first snapshot (current or newer) for which ``predicate`` holds.

        Raises:
            TimeoutError: after ``timeout`` seconds.
            MembershipError: the service stopped first.
        """
        snapshot = await self._publisher.wait_for(predicate, self._clock, timeout)
        if snapshot is not None:
            return snapshot
        raise MembershipError(f"{self!r} stopped before the awaited membership change")

    def statistics(self) -> MembershipStatistics:
        snapshot = self.snapshot
        return MembershipStatistics(
            status=self._status,
            version=snapshot.version,
            active_silos=len(snapshot.active_silos),
            monitored=self._detector.monitored,
            probes_sent=self._detector.probes_sent,
            probes_failed=self._detector.probes_failed,
            indirect_probes=self._detector.indirect_probes,
            votes_cast=self._votes_cast,
            silos_declared_dead=self._declared,
            step_failures=self._loops.step_failures,
        )

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        """Join: JOINING, reach every active silo, ACTIVE; then run the periodic loops.

        Raises:
            MembershipError: a newer generation of this endpoint is in the table, this address
                is already DEAD, or some active silo stayed unreachable for
                ``max_join_attempt_time`` (this silo's row is then marked DEAD).
        """
        if self._started:
            raise RuntimeError(f"{self!r}: start() was already called")
        self._started = True
        options = self.options
        deadline = self._clock.monotonic() + options.max_join_attempt_time
        self._start_time = self._clock.time()
        self._log.info("membership_joining")
        try:
            await self.table.open()
            await self._write_joining_row(deadline)
            self._loops.start("i_am_alive", options.i_am_alive_period, self.heartbeat)
            await self._validate_connectivity(deadline)
            await self._write_own_status(_ACTIVE)
        except BaseException:
            with contextlib.suppress(Exception):
                await self.stop()  # marks the row DEAD: nobody waits for a silo that failed
            raise
        self._loops.start("table_refresh", options.table_refresh_period, self.refresh)
        self._loops.start("probe_round", options.probe_period, self.probe_round)
        if options.defunct_silo_cleanup_period is not None:
            self._loops.start(
                "defunct_cleanup", options.defunct_silo_cleanup_period, self.cleanup_defunct
            )
        self._log.info("membership_active", version=self.snapshot.version)

    async def begin_shutdown(self) -> None:
        """Write SHUTTING_DOWN: others stop placing work here. Probing goes on until ``stop``."""
        if self._status in (_JOINING, _ACTIVE) and not self._stopping:
            await self._write_own_status(_SHUTTING_DOWN)

    async def stop(self) -> None:
        """Leave gracefully: SHUTTING_DOWN (if not yet), stop the loops, write DEAD.

        Idempotent. After a declared death or ``abort`` it only stops the tasks.
        """
        async with self._stop_lock:
            if self._stopped:
                return
            if not self._stopping and self._status is not None:
                try:
                    await self.begin_shutdown()
                except Exception as exc:
                    self._log.warning("membership_leave_failed", step="shutting_down",
                                      error=repr(exc))
                self._stopping = True
                await self._cancel_tasks()
                try:
                    await self._write_own_status(_DEAD)
                except Exception as exc:
                    self._log.warning("membership_leave_failed", step="dead", error=repr(exc))
            self._stopping = True
            self._publisher.close()
            await self._cancel_tasks()
            self._stopped = True
            self._log.info(
                "membership_stopped", status=None if self._status is None else self._status.value
            )

    async def abort(self) -> None:
        """Stop every task without writing to the table, as a crashed process would."""
        self._stopping = True
        self._stopped = True
        self._publisher.close()
        await self._cancel_tasks()

    # -- steps (the loops call them; tests and tools may too) ------------------------------
    async def refresh(self) -> MembershipSnapshot:
        """Read the table now and publish what changed."""
        await self._read_all()
        return self.snapshot

    async def heartbeat(self) -> None:
        """Write this silo's I-am-alive time."""
        if not await self.table.update_i_am_alive(self.silo, self._clock.time()):
            await self.refresh()  # the row is gone: the refresh finds this silo dead

    async def probe_round(self) -> None:
        """Probe every monitored silo once (concurrently); vote on the ones that keep missing."""
        if self._status is _ACTIVE and not self._stopping:
            await self._detector.probe_round()

    async def cleanup_defunct(self) -> int:
        """Delete DEAD rows older than ``defunct_silo_expiration``; return how many."""
        before = self._clock.time() - self.options.defunct_silo_expiration
        removed = await self.table.cleanup_defunct(before)
        if removed:
            self._log.info("membership_defunct_rows_deleted", count=removed)
        return removed

    async def suspect(self, silo: SiloAddress, *, also: SiloAddress | None = None) -> bool:
        """Vote ``silo`` dead (with ``also``'s vote: an intermediary that could not reach it
        either); declare it DEAD if that brings its fresh votes to the required count.

        Returns True once the vote is written or the silo is dead, False if this silo stopped
        or the row is gone, or after too many write conflicts.
        """
        if self.silo in (silo, also):
            raise ValueError(f"{self.silo} cannot vote against itself")
        options = self.options
        expiration = options.death_vote_expiration_timeout
        async with self._suspect_lock:
            for _ in range(_MAX_WRITE_ATTEMPTS):
                data = await self._read_all()
                row = data.get(silo)
                if self._stopping or row is None:
                    return False
                entry, etag = row
                if entry.status is _DEAD:
                    return True
                now = self._clock.time()
                votes = add_vote(entry.suspect_votes, self.silo, now, expiration=expiration)
                if also is not None:
                    votes = add_vote(votes, also, now, expiration=expiration)
                required = votes_required(
                    data.entries(), now, votes=options.num_votes_for_death_declaration,
                    i_am_alive_expiration=options.i_am_alive_expiration,
                )
                dead = len(fresh_votes(votes, now, expiration)) >= required
                status = _DEAD if dead else entry.status
                new = dataclasses.replace(entry, status=status, suspect_votes=votes)
                if await self.table.update_row(new, etag, data.version):
                    self._votes_cast += 1 if also is None else 2
                    voters = [str(v.voter) for v in votes]
                    if dead:
                        self._declared += 1
                        self._log.warning("membership_silo_declared_dead", target=str(silo),
                                          voters=voters)
                    else:
                        self._log.warning("membership_silo_suspected", target=str(silo),
                                          voters=voters, required=required)
                    await self._after_write()
                    return True
                await asyncio.sleep(0)
        self._log.warning("membership_vote_not_written", target=str(silo))
        return False

    async def _suspect_for_detector(self, silo: SiloAddress, also: SiloAddress | None) -> None:
        await self.suspect(silo, also=also)

    # -- answering other silos (the transport calls these) ---------------------------------
    def handle_probe(self) -> bool:
        """The answer to another silo's ping: True while this silo is a live member."""
        return self._status is not None and self._status is not _DEAD and not self._stopped

    async def handle_indirect_probe(self, target: SiloAddress, timeout: float) -> bool:
        """Probe ``target`` on behalf of another silo that cannot reach it."""
        return await self._detector.probe(target, timeout)

    async def on_gossip(self, version: int) -> None:
        """Another silo wrote version ``version``: refresh now if that is news."""
        if version > self.snapshot.version and self._status is not None and not self._stopping:
            await self.refresh()

    # -- joining ---------------------------------------------------------------------------
    def _entry(self, status: SiloStatus) -> MembershipEntry:
        return MembershipEntry(
            silo=self.silo,
            status=status,
            silo_name=self._silo_name,
            host_name=self._host_name,
            gateway_port=self._gateway_port,
            start_time=self._start_time,
            i_am_alive_time=self._clock.time(),
        )

    def _check_deadline(self, deadline: float, what: str) -> None:
        if self._stopping:
            raise MembershipError(f"{self.silo} stopped while joining the cluster")
        if self._clock.monotonic() >= deadline:
            raise MembershipError(
                f"{self.silo} could not {what} within {self.options.max_join_attempt_time} s "
                "(MembershipOptions.max_join_attempt_time)"
            )

    async def _write_joining_row(self, deadline: float) -> None:
        me = self.silo
        while True:
            data = await self._read_all()
            older: tuple[MembershipEntry, str] | None = None
            for entry, etag in data.rows:
                other = entry.silo
                if (other.host, other.port) != (me.host, me.port) or other == me:
                    continue
                if entry.status is _DEAD:
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
                dead = dataclasses.replace(entry, status=_DEAD)
                if await self.table.update_row(dead, etag, data.version):
                    self._log.info("membership_old_generation_declared_dead",
                                   target=str(entry.silo))
                    continue
            else:
                mine = data.get(me)
                if mine is not None and mine[0].status is _DEAD:
                    raise MembershipError(
                        f"{me} is already DEAD in the membership table, and a dead address "
                        "never comes back: restart the silo with a new generation"
                    )
                entry = self._entry(_JOINING)
                if mine is None:
                    written = await self.table.insert_row(entry, data.version)
                else:
                    written = await self.table.update_row(entry, mine[1], data.version)
                if written:
                    self._status = _JOINING
                    self._own_version = data.version.version + 1
                    await self._after_write()
                    return
            self._check_deadline(deadline, "write its membership row")
            await asyncio.sleep(0)

    async def _validate_connectivity(self, deadline: float) -> None:
        options = self.options
        while True:
            if self._stopping:
                raise MembershipError(f"{self.silo} stopped while joining the cluster")
            snapshot = self.snapshot
            now = self._clock.time()
            targets = [
                silo
                for silo, entry in snapshot.entries.items()
                if silo != self.silo
                and entry.status is _ACTIVE
                and not is_stale(entry, now, options.i_am_alive_expiration)
            ]
            results = await asyncio.gather(*(self._detector.probe(t) for t in targets))
            unreachable = sorted(str(t) for t, ok in zip(targets, results, strict=True) if not ok)
            if not unreachable:
                return
            self._log.warning("membership_join_silos_unreachable", silos=unreachable)
            self._check_deadline(deadline, f"reach the active silos {', '.join(unreachable)}")
            await self._clock.sleep(options.probe_period)
            await self.refresh()

    async def _write_own_status(self, status: SiloStatus) -> None:
        for _ in range(_MAX_WRITE_ATTEMPTS):
            data = await self.table.read_row(self.silo)
            row = data.get(self.silo)
            if row is None or (row[0].status is _DEAD and status is not _DEAD):
                await self._read_all()  # publishes the truth, and finds this silo dead
                raise MembershipError(
                    f"{self.silo} cannot become {status.value}: it was declared dead"
                )
            entry, etag = row
            if entry.status is status:
                self._status = status
                return
            new = dataclasses.replace(entry, status=status, i_am_alive_time=self._clock.time())
            if await self.table.update_row(new, etag, data.version):
                self._status = status
                self._log.info("membership_status_written", status=status.value)
                await self._after_write()
                return
            await asyncio.sleep(0)
        raise MembershipError(
            f"{self.silo} could not write its status {status.value}: "
            f"{_MAX_WRITE_ATTEMPTS} write conflicts in a row"
        )

    # -- reading ---------------------------------------------------------------------------
    async def _read_all(self) -> MembershipTableData:
        began = self._clock.monotonic()
        data = await self.table.read_all()
        self._apply(data)
        mine = data.get(self.silo)
        if mine is not None and mine[0].status is not _DEAD and not self._declared_dead:
            self.confirmed_at = max(self.confirmed_at, began)
        return data

    @property
    def fence_timeout(self) -> float:
        """How long this silo serves without confirming, by a table read, that it is still a
        live member: ``num_missed_probes_limit x probe_timeout`` (the time the others need to
        suspect it), and at least two table refresh periods."""
        return self._fence_timeout

    def fenced(self) -> bool:
        """True while this silo has not confirmed its membership within ``fence_timeout``
        (after a pause, say): it must not serve until a table read confirms it (or finds it
        dead). Starts that read at once."""
        if self._status is not _ACTIVE and self._status is not _SHUTTING_DOWN:
            return self._declared_dead
        if self._clock.monotonic() - self.confirmed_at <= self._fence_timeout:
            return False
        if self._confirming is None or self._confirming.done():
            self._log.warning("membership_fenced", unconfirmed_for=round(
                self._clock.monotonic() - self.confirmed_at, 3))
            self._confirming = asyncio.ensure_future(self._confirm())
        return True

    async def _confirm(self) -> None:
        try:
            await self.refresh()
        except Exception as exc:
            self._log.warning("membership_confirm_failed", error=repr(exc))

    def _apply(self, data: MembershipTableData) -> None:
        snapshot = MembershipSnapshot.from_table(data)
        previous = self.snapshot
        if snapshot.version < previous.version:
            return  # a read that finished after a newer one
        diagnostics = self._diagnostics
        if self._publisher.publish(snapshot) and diagnostics is not None and diagnostics.listening:
            for change in snapshot.changes_since(previous):
                diagnostics.emit(
                    SiloStatusChanged(self._name, str(change.silo), change.current.value)
                )
        self._detector.update(snapshot)
        if self._status is None or self._stopping or snapshot.version < self._own_version:
            return
        mine = snapshot.entries.get(self.silo)
        if mine is None or mine.status is _DEAD:
            self._found_myself_dead(mine)

    def _found_myself_dead(self, entry: MembershipEntry | None) -> None:
        self._declared_dead = True
        self._stopping = True
        self._status = _DEAD
        self._log.error(
            "membership_found_myself_dead",
            row="missing" if entry is None else "dead",
            voters=[] if entry is None else [str(v.voter) for v in entry.suspect_votes],
        )
        self._publisher.close()  # listeners end after the snapshot that says so
        self._loops.cancel()
        if self._on_declared_dead is not None:
            try:
                self._on_declared_dead()
            except Exception as exc:
                self._log.error("membership_declared_dead_callback_failed", error=repr(exc))

    # -- tasks -----------------------------------------------------------------------------
    async def _after_write(self) -> None:
        await self.refresh()
        await self._gossip()

    async def _gossip(self) -> None:
        gossiper = self._gossiper
        if gossiper is None:
            return
        snapshot = self.snapshot
        peers = [s for s in snapshot.silos(*PROBED_STATUSES) if s != self.silo]

        async def tell(peer: SiloAddress) -> None:
            try:
                async with self._clock.timeout(self.options.probe_timeout):
                    await gossiper.gossip(peer, snapshot.version)
            except Exception as exc:
                self._log.debug("membership_gossip_failed", target=str(peer), error=repr(exc))

        await asyncio.gather(*(tell(peer) for peer in peers))

    async def _cancel_tasks(self) -> None:
        """Cancel the loops and listeners (not the calling task) and wait for them."""
        self._loops.cancel()
        await self._loops.tasks.wait()
        await self._publisher.cancel_listeners()
