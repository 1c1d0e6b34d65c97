"""SiloOperations: the control requests a cluster silo answers for tools and other silos.

``orleanspy cluster status``, ``streams status``, ``grains locate``, ``grains top`` and the
dashboard ask each silo through its transport; the peers' probes, gossip, load reports and
cache hints arrive here too. The silo builder puts these functions in the transport's
handler table.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import TYPE_CHECKING, Any, final

from orleanspy.cluster.transport import decode_silo
from orleanspy.errors import MessageRejectedError
from orleanspy.ids import GrainId
from orleanspy.runtime.grain_report import activation_report, grain_page
from orleanspy.runtime.reports import reminders_report, status_report, streams_report
from orleanspy.runtime.silo import Silo

if TYPE_CHECKING:
    from orleanspy.cluster.runtime import ClusterRuntime

__all__ = ["SiloOperations"]


@final
class SiloOperations:
    """What a silo reports of itself, and the peers' hints it takes.

    Args:
        silo: the silo (its statistics, stream providers, catalog, call statistics).
        cluster: its cluster runtime (membership status, view, directory, placement).
    """

    def __init__(self, silo: Silo, cluster: ClusterRuntime) -> None:
        self._silo = silo
        self._cluster = cluster

    def status(self) -> dict[str, Any]:
        """What ``orleanspy cluster status`` shows for this silo."""
        silo = self._silo
        cluster = self._cluster
        queues: dict[str, list[str]] = {}
        all_queues: dict[str, list[str]] = {}  # every queue of the provider, pulled or not
        for name, provider in silo.stream_providers.items():
            agents = getattr(provider, "agents", {})
            queues[name] = sorted(str(q) for q in agents)
            mapper = getattr(provider, "mapper", None)
            if mapper is not None:
                all_queues[name] = [str(q) for q in mapper.all_queues()]
        membership = cluster.membership
        snapshot = cluster.snapshot
        return {
            **status_report(silo, silo.statistics()),
            "silo": str(cluster.me),
            "status": membership.status.value if membership and membership.status else None,
            "pid": os.getpid(),
            "queues": queues,
            "all_queues": all_queues,
            "directory_entries": len(cluster.directory.partition),
            "view_version": snapshot.version,
            "active_silos": [str(s) for s in snapshot.active_silos],
        }

    async def locate(self, type_name: Any, key: Any) -> dict[str, Any]:
        """Where a grain is active (``orleanspy grains locate``), from the directory; asking
        never activates it."""
        if not isinstance(type_name, str) or type(key) not in (str, int, uuid.UUID):
            raise MessageRejectedError(
                "locate takes a grain type name and a str, int or UUID key", "bad_arguments")
        grain_id = GrainId(type_name, key)
        info = self._silo.catalog.info_for(grain_id)  # unknown type: says which one is close
        cluster = self._cluster
        if not cluster.uses_directory(info):
            return {"grain": f"{type_name}/{key}", "directory": False, "silo": None}
        entry = await cluster.directory.lookup(grain_id)
        return {"grain": f"{type_name}/{key}", "directory": True,
                "silo": str(entry.silo) if entry is not None else None,
                "entry_held_by": str(cluster.directory.owner(grain_id))}

    async def grain(self, type_name: Any, key: Any, local: Any = False) -> dict[str, Any]:
        """The grain page (``orleanspy grains show``, the dashboard): the directory says
        where the grain is active; that silo reads its activation table (``local``: this is
        that request); this silo adds the reminder rows, the subscriptions every live silo's
        pulling agents deliver and, when enabled, the stored state of an inactive grain.
        Asking never activates the grain (``runtime.grain_report``)."""
        if not isinstance(type_name, str) or type(key) not in (str, int, uuid.UUID):
            raise MessageRejectedError(
                "grain takes a grain type name and a str, int or UUID key", "bad_arguments")
        grain_id = GrainId(type_name, key)
        silo = self._silo
        info = silo.catalog.info_for(grain_id)  # unknown type: says which one is close
        if local:
            return activation_report(silo, grain_id)
        cluster = self._cluster
        report = activation_report(silo, grain_id)
        if not cluster.uses_directory(info):
            return {"grain": str(grain_id), "type": type_name, "directory": False,
                    "key": key if isinstance(key, (int, str)) else str(key),
                    **{k: v for k, v in report.items() if k in ("asked", "methods",
                                                                 "methods_silo")},
                    "active": False, "silo": None}
        entry = await cluster.directory.lookup(grain_id)
        timeout = 2.0  # each peer's answer (as the dashboard's view): under a tool's 3 s
        if entry is not None and entry.silo != cluster.me:
            try:
                report = await cluster.transport.request(
                    entry.silo, "grain", [type_name, key, True], timeout)
            except Exception as exc:  # the directory names a silo that does not answer
                report = {"active": True, "silo": str(entry.silo), "asked": str(cluster.me),
                          "unreachable": repr(exc), "methods": []}
        peers = [s for s in cluster.snapshot.active_silos if s != cluster.me]
        answers = await asyncio.gather(*(
            cluster.transport.request(p, "streams", [], timeout) for p in peers),
            return_exceptions=True)
        streams = [self.streams_status(), *(a for a in answers if isinstance(a, dict))]
        return await grain_page(silo, grain_id, info, report, streams)

    def streams_status(self) -> dict[str, Any]:
        """What ``orleanspy streams status`` shows for this silo: each provider's agents
        and latency histograms."""
        return {"silo": str(self._cluster.me), **streams_report(self._silo)}

    def reminders_status(self) -> dict[str, Any]:
        """The reminders this silo fires (the dashboard's reminder panel)."""
        return {"silo": str(self._cluster.me), **reminders_report(self._silo)}

    def call_statistics(self) -> dict[str, Any]:
        """What ``orleanspy grains top`` reads: each grain method's cumulative calls,
        errors, seconds and latency buckets on this silo (``runtime.call_stats``)."""
        return {"silo": str(self._cluster.me), "types": self._silo.call_statistics.snapshot()}

    def handle_probe(self) -> bool:
        """Another silo's ping: True while this silo is a live member."""
        membership = self._cluster.membership
        return membership is not None and membership.handle_probe()

    async def probe_indirect(self, target: Any, timeout: Any) -> bool:
        """Probe ``target`` for a silo that cannot reach it."""
        membership = self._cluster.membership
        if membership is None:
            return False
        return await membership.handle_indirect_probe(decode_silo(target), float(timeout))

    async def on_gossip(self, version: int) -> None:
        """Another silo wrote the membership table: refresh if that is news."""
        membership = self._cluster.membership
        if membership is not None:
            await membership.on_gossip(version)

    def on_load(self, silo: Any, count: Any) -> None:
        """A peer's activation count (activation-count placement)."""
        self._cluster.placement.loads[decode_silo(silo)] = int(count)

    def on_cache(self, grain_id: Any, silo: Any) -> None:
        """A peer's hint of where a grain lives (it forwarded a message of this silo's)."""
        if type(grain_id) is GrainId:
            self._cluster.directory.cache.put(grain_id, decode_silo(silo))
