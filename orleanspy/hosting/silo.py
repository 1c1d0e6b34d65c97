"""Silo: the public silo (``orleanspy.Silo``), built from options by the silo builder.

A subclass of ``orleanspy.runtime.silo.Silo`` rather than a wrapper: grains, streams,
system targets and tests hold the silo object itself (``grain.silo``, ``provider.silo``).
Its constructor hands the options to ``orleanspy.hosting.builder.build_silo``, which builds
every component (storage, reminders, cluster, gateway, streams, Spark) and subscribes each
to the lifecycle; the core takes the parts it returns.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType
from typing import Any

from orleanspy._util.clock import Clock
from orleanspy.cluster.membership.options import MembershipOptions
from orleanspy.cluster.membership.table import MembershipTable
from orleanspy.hosting.builder import build_silo
from orleanspy.reminders.base import ReminderTable
from orleanspy.runtime.call_filters import CallFilter
from orleanspy.runtime.options import SiloOptions
from orleanspy.runtime.silo import Silo as SiloCore
from orleanspy.spark.options import SparkOptions
from orleanspy.spark.session import SparkSessionManager
from orleanspy.storage.base import GrainStorage

__all__ = ["Silo"]


class Silo(SiloCore):
    """A process (or part of one) that hosts grains.

    Example::

        async with Silo(SiloOptions(gateway_port=None), grains=[Counter]) as silo:
            counter = silo.get_grain(Counter, "a")
            await counter.increment()

    Args:
        options: the silo's options (default ``SiloOptions()``).
        grains, modules: the grain classes it hosts, and modules whose classes it hosts.
        storage: grain storage by name (``default``: from ``options.storage`` unless given).
        reminder_table: the reminder table (default: from ``options.reminders``).
        clock: the clock every component reads (default: the system clock).
        stream_providers: stream providers by name.
        membership_table, membership_options: a membership table to join (tests share one
            in-memory table between silos) and failure-detection settings; a table or
            ``options.membership`` makes a cluster silo.
        spark: the Spark session's options (the silo stops it) or a shared manager; None:
            a ``SparkGrain`` makes one with default options on first use.
    """

    def __init__(
        self,
        options: SiloOptions | None = None,
        *,
        grains: Iterable[type] = (),
        modules: Iterable[ModuleType | str] = (),
        storage: dict[str, GrainStorage] | None = None,
        reminder_table: ReminderTable | None = None,
        clock: Clock | None = None,
        stream_providers: dict[str, Any] | None = None,
        membership_table: MembershipTable | None = None,
        membership_options: MembershipOptions | None = None,
        spark: SparkOptions | SparkSessionManager | None = None,
        call_filters: Iterable[CallFilter] = (),
        outgoing_call_filters: Iterable[CallFilter] = (),
    ) -> None:
        super().__init__(build_silo(
            self, options, grains=grains, modules=modules, storage=storage,
            reminder_table=reminder_table, clock=clock, stream_providers=stream_providers,
            membership_table=membership_table, membership_options=membership_options,
            spark=spark,
        ))
        for fn in call_filters:
            self.add_call_filter(fn)
        for fn in outgoing_call_filters:
            self.add_call_filter(fn, outgoing=True)
