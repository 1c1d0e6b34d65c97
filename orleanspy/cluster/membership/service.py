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
* Leave: SHUTTING_DOWN (``begin_shutdown``), then STOPPED (``stop``): a graceful stop is
  told apart from a crash, which the others record as DEAD.
* Cleanup: every ``defunct_silo_cleanup_period`` the active silo with the lowest address
  deletes STOPPED and DEAD rows older than ``defunct_silo_expiration`` (one silo, not all).

Time comes from the injected ``Clock``: decisions use ``clock.time()`` (wall time, comparable
across processes); loops sleep, and probes and gossip time out, on the same clock. Tests
drive the steps directly (``refresh``, ``probe_round``, ``heartbeat``) or advance a
``FakeClock`` to run the loops.

Each status change of a silo in this silo's view is emitted as ``SiloStatusChanged`` on the
``diagnostics`` hub (when somebody listens).

Split by role: this module holds the service's own state (status, own version, stopping,
fencing) and the reactions to each table read, which every step shares; the parts that need
only their inputs live apart: the compare-and-swap writes (``writes.py``), probing and the
join's connectivity check (``probing.py``), the periodic loops (``loops.py``), gossip
(``gossip.py``), and the snapshot listeners (``snapshot.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any, final

from orleanspy._util.clock import Clock, SystemClock
from orleanspy.cluster.membership.entry import MembershipEntry, MembershipTableData, SiloStatus
from orleanspy.cluster.membership.gossip import tell_peers
from orleanspy.cluster.membership.loops import PeriodicSteps
from orleanspy.cluster.membership.options import MembershipOptions
from orleanspy.cluster.membership.prober import Gossiper, Prober
from orleanspy.cluster.membership.probing import FailureDetector
from orleanspy.cluster.membership.snapshot import Listener, MembershipSnapshot, SnapshotPublisher
from orleanspy.cluster.membership.table import MembershipTable
from orleanspy.cluster.membership.writes import TableWriter, VoteOutcome
from orleanspy.diagnostics import Diagnostics, SiloStatusChanged
from orleanspy.errors import MembershipError
from orleanspy.ids import SiloAddress
from orleanspy.logging import get_logger

__all__ = ["MembershipService", "MembershipStatistics"]

_JOINING, _ACTIVE = SiloStatus.JOINING, SiloStatus.ACTIVE
_SHUTTING_DOWN, _DEAD = SiloStatus.SHUTTING_DOWN, SiloStatus.DEAD
_STOPPED = SiloStatus.STOPPED


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
        self._on_declared_dead = on_declared_dead
        self._log = get_logger(__name__, silo=str(silo))
        self._detector = FailureDetector(
            silo, prober, self.options, self._clock, self._suspect_for_detector,
            lambda: self._stopping, rng or random.Random(), self._log,
        )
        self._publisher = SnapshotPublisher(self._log)
        self._writes = TableWriter(
            table, silo, o, self._clock, self._read_all, lambda: self._stopping,
            silo_name=silo_name, host_name=host_name, gateway_port=gateway_port, log=self._log,
        )
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
            votes_cast=self._writes.votes_cast,
            silos_declared_dead=self._writes.silos_declared_dead,
            step_failures=self._loops.step_failures,
        )

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        """Join, then become active (``join`` and ``become_active`` in one step).

        Raises:
            MembershipError: as ``join`` and ``become_active``.
        """
        await self.join()
        await self.become_active()

    async def join(self) -> None:
        """Write this silo's row as JOINING and reach every active silo. Others place no
        work here yet: a silo host starts its components now, and calls ``become_active``
        once all of them have started.

        Raises:
            MembershipError: a newer generation of this endpoint is in the table, this address
                is already DEAD, or some active silo stayed unreachable for
                ``max_join_attempt_time`` (this silo's row is then marked STOPPED).
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
        except BaseException:
            with contextlib.suppress(Exception):
                await self.stop()  # marks the row STOPPED: nobody waits for it
            raise

    async def become_active(self) -> None:
        """Write ACTIVE (others may place work here from now on); run the periodic loops.

        Raises:
            MembershipError: the row was declared dead meanwhile (the row is then left as
                the others wrote it).
        """
        options = self.options
        try:
            await self._write_own_status(_ACTIVE)
        except BaseException:
            with contextlib.suppress(Exception):
                await self.stop()
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
        """Leave gracefully: SHUTTING_DOWN (if not yet), stop the loops, write STOPPED.

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
                    await self._write_own_status(_STOPPED)
                except Exception as exc:
                    self._log.warning("membership_leave_failed", step="stopped",
                                      error=repr(exc))
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
        """Delete STOPPED and DEAD rows older than ``defunct_silo_expiration``; return how
        many. Only the active silo with the lowest address deletes (the others return 0), so
        that a cluster of many silos sends the table one delete per period, not one each."""
        active = self.snapshot.active_silos
        if self._status is not _ACTIVE or not active or active[0] != self.silo:
            return 0
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
        async with self._suspect_lock:
            outcome = await self._writes.vote(silo, also)
            if outcome is VoteOutcome.WRITTEN:
                await self._after_write()
        return outcome is not VoteOutcome.NOT_WRITTEN

    async def _suspect_for_detector(self, silo: SiloAddress, also: SiloAddress | None) -> None:
        await self.suspect(silo, also=also)

    # -- answering other silos (the transport calls these) ---------------------------------
    def handle_probe(self) -> bool:
        """The answer to another silo's ping: True while this silo is a live member."""
        return self._status is not None and not self._status.is_gone and not self._stopped

    async def handle_indirect_probe(self, target: SiloAddress, timeout: float) -> bool:
        """Probe ``target`` on behalf of another silo that cannot reach it."""
        return await self._detector.probe(target, timeout)

    async def on_gossip(self, version: int) -> None:
        """Another silo wrote version ``version``: refresh now if that is news."""
        if version > self.snapshot.version and self._status is not None and not self._stopping:
            await self.refresh()

    # -- joining ---------------------------------------------------------------------------
    async def _write_joining_row(self, deadline: float) -> None:
        own_version = await self._writes.joining_row(deadline, self._start_time)
        self._status = _JOINING
        self._own_version = own_version
        await self._after_write()

    async def _validate_connectivity(self, deadline: float) -> None:
        while True:
            if self._stopping:
                raise MembershipError(f"{self.silo} stopped while joining the cluster")
            unreachable = await self._detector.unreachable_active(self.snapshot)
            if not unreachable:
                return
            self._log.warning("membership_join_silos_unreachable", silos=unreachable)
            self._writes.check_join_deadline(
                deadline, f"reach the active silos {', '.join(unreachable)}"
            )
            await self._clock.sleep(self.options.probe_period)
            await self.refresh()

    async def _write_own_status(self, status: SiloStatus) -> None:
        written = await self._writes.own_status(status)
        self._status = status
        if written:
            await self._after_write()

    # -- reading ---------------------------------------------------------------------------
    async def _read_all(self) -> MembershipTableData:
        began = self._clock.monotonic()
        data = await self.table.read_all()
        self._apply(data)
        mine = data.get(self.silo)
        if mine is not None and not mine[0].status.is_gone and not self._declared_dead:
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
        if mine is None or mine.status.is_gone:
            self._found_myself_dead(mine)

    def _found_myself_dead(self, entry: MembershipEntry | None) -> None:
        self._declared_dead = True
        self._stopping = True
        self._status = _DEAD
        self._log.error(
            "membership_found_myself_dead",
            row="missing" if entry is None else entry.status.value,
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
        if self._gossiper is not None:
            await tell_peers(self._gossiper, self.silo, self.snapshot, self._clock,
                             self.options.probe_timeout, self._log)

    async def _cancel_tasks(self) -> None:
        """Cancel the loops and listeners (not the calling task) and wait for them."""
        self._loops.cancel()
        await self._loops.tasks.wait()
        await self._publisher.cancel_listeners()
