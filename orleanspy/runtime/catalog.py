"""Catalog: the silo's activations by grain id; get-or-activate; stateless worker groups.

Everything here is synchronous: within one event loop, get-or-create cannot race, so there
is exactly one activation per grain id on the silo. Across silos, the silo's locator (the
cluster's directory registration) extends that guarantee.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping

from orleanspy.errors import MessageRejectedError, SiloUnavailableError
from orleanspy.grains.interface import GrainClassInfo
from orleanspy.ids import GrainId
from orleanspy.runtime.activation import Activation, ActivationHost, ActivationState

__all__ = ["Catalog", "WorkerGroup"]


class WorkerGroup:
    """The local activations of one stateless-worker grain id (at most ``limit``)."""

    __slots__ = ("grain_id", "info", "limit", "workers")

    def __init__(self, grain_id: GrainId, info: GrainClassInfo, limit: int) -> None:
        self.grain_id = grain_id
        self.info = info
        self.limit = limit
        self.workers: list[Activation] = []

    def pick(self, catalog: Catalog) -> Activation:
        best: Activation | None = None
        best_load = 0
        for act in self.workers:
            if act.state > ActivationState.VALID:
                continue
            load = len(act.running) + len(act.waiting)
            if load == 0 and act.state is ActivationState.VALID:
                return act
            if best is None or load < best_load:
                best, best_load = act, load
        if len(self.workers) < self.limit or best is None:
            act = catalog.new_activation(self.grain_id, self.info)
            self.workers.append(act)
            act.start()
            return act
        return best


class Catalog:
    """Activations of one silo, keyed by grain id."""

    __slots__ = ("_count", "_registry", "_workers", "activations", "silo")

    def __init__(self, silo: ActivationHost, registry: Mapping[str, GrainClassInfo]) -> None:
        """``silo`` hosts the activations; ``registry``: the grain classes by type name
        (the silo's, read on use: classes may be registered after the catalog exists)."""
        self.silo = silo
        self._registry = registry
        self.activations: dict[GrainId, Activation] = {}
        self._workers: dict[GrainId, WorkerGroup] = {}
        self._count = 0

    def get(self, grain_id: GrainId) -> Activation | None:
        return self.activations.get(grain_id)

    def get_or_create(self, grain_id: GrainId) -> Activation:
        act = self.activations.get(grain_id)
        if act is not None:
            return act
        group = self._workers.get(grain_id)
        if group is not None:
            return group.pick(self)
        info = self.info_for(grain_id)
        if info.is_system_target:
            raise MessageRejectedError(
                f"no system target {grain_id} on silo {self.silo.name}: system targets are "
                "created explicitly with silo.add_system_target()",
                "unknown_system_target",
            )
        if info.stateless_worker:
            limit = info.max_local_workers or self.silo.options.max_local_workers
            group = WorkerGroup(grain_id, info, limit)
            self._workers[grain_id] = group
            return group.pick(self)
        act = self.new_activation(grain_id, info)
        self.activations[grain_id] = act
        act.start()
        return act

    def info_for(self, grain_id: GrainId) -> GrainClassInfo:
        """The class of a grain id's type; ``MessageRejectedError`` if the silo lacks it."""
        info = self._registry.get(grain_id.type_name)
        if info is None:
            hosted = [n for n in self._registry if not n.startswith("orleanspy.")]
            close = difflib.get_close_matches(grain_id.type_name, hosted, n=1)
            hint = f"did you mean {close[0]!r}? If not, " if close else ""
            raise MessageRejectedError(
                f"unknown grain type {grain_id.type_name!r} on silo {self.silo.name}: "
                f"{hint}add its module to --app (or the grains= list of the Silo)",
                "unknown_grain_type",
            )
        return info

    def new_activation(self, grain_id: GrainId, info: GrainClassInfo) -> Activation:
        if not self.silo.started:
            raise RuntimeError(f"start the silo before calling grains ({grain_id})")
        if self.silo.stopping:
            raise SiloUnavailableError(
                f"silo {self.silo.name} is shutting down and creates no new activations"
            )
        self._count += 1
        return Activation(self.silo, grain_id, info)

    def add(self, act: Activation) -> None:
        """Register a ready activation (system targets)."""
        if act.grain_id in self.activations:
            raise ValueError(f"{act.grain_id} is already active on this silo")
        self.activations[act.grain_id] = act
        self._count += 1

    def remove(self, act: Activation) -> None:
        gid = act.grain_id
        if self.activations.get(gid) is act:
            del self.activations[gid]
            self._count -= 1
            self.silo.locator.activation_removed(act)
            return
        group = self._workers.get(gid)
        if group is not None and act in group.workers:
            group.workers.remove(act)
            self._count -= 1
            if not group.workers:
                del self._workers[gid]

    def __iter__(self) -> Iterator[Activation]:
        yield from list(self.activations.values())
        for group in list(self._workers.values()):
            yield from list(group.workers)

    def __len__(self) -> int:
        return self._count

    def workers_of(self, grain_id: GrainId) -> list[Activation]:
        group = self._workers.get(grain_id)
        return list(group.workers) if group else []
