"""QueueAssigner: the contract of every queue-assignment algorithm (who pulls which queue).

Data path: the pulling manager of each silo asks a balancer for its queues; the balancer runs
one of these pure algorithms over (queues, active silos, previous assignment). Every silo must
compute the same answer from the same inputs, so the algorithms use stable hashes only
(``orleanspy._util.hashing``), never ``hash()``, and never depend on the order of ``silos``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import ClassVar, TypeVar

from orleanspy._util.hashing import stable_hash64

__all__ = ["Assignment", "QueueAssigner", "QueueT"]

QueueT = TypeVar("QueueT", bound=Hashable)
"""A queue key: any hashable whose ``str()`` is the same in every process (``QueueId``, int)."""

Assignment = dict[QueueT, str]
"""queue -> the silo that owns it (pulls it)."""


class QueueAssigner(ABC):
    """Assigns every queue to exactly one of the active silos.

    Guarantees of every implementation:

    * the result maps every queue of ``queues`` to one silo of ``silos`` (a partition), and
      is empty only when ``silos`` is empty;
    * it is a pure function of its arguments: the same on every silo and in every process
      (stable hashes), independent of the order of ``silos``; ``queues`` must be given in the
      same order everywhere (``HashRingQueueMapper.all_queues()`` is);
    * ``previous`` is read, never modified; algorithms with ``uses_previous = False`` ignore it.

    Attributes:
        exactly_balanced: every silo always gets ``floor(Q/S)`` or ``ceil(Q/S)`` queues.
        uses_previous: the result depends on ``previous`` (the runtime must agree on it, e.g.
            through leases in the membership store); otherwise membership alone decides.
    """

    __slots__ = ()

    exactly_balanced: ClassVar[bool] = False
    uses_previous: ClassVar[bool] = False

    @property
    @abstractmethod
    def name(self) -> str:
        """Short name for tables and logs, e.g. ``"sticky"`` or ``"bounded-0.25"``."""

    @abstractmethod
    def assign(
        self,
        queues: Sequence[QueueT],
        silos: Iterable[str],
        previous: Mapping[QueueT, str] | None = None,
    ) -> dict[QueueT, str]:
        """The owner of every queue.

        Args:
            queues: every queue, distinct, in the same order on every silo.
            silos: the active silos (names or addresses as text); duplicates are ignored.
            previous: the assignment in force before this change (queue -> silo); owners that
                are no longer in ``silos`` and queues no longer in ``queues`` are ignored.

        Returns:
            A new dict: queue -> silo, covering every queue (empty when there is no silo).

        Raises:
            ValueError: ``queues`` has duplicates or a silo name is empty.
            TypeError: a silo name is not a str.
        """

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def prepare(queues: Sequence[QueueT], silos: Iterable[str]) -> list[str]:
    """Validate the inputs; return the silos de-duplicated and sorted (the canonical order).

    Raises:
        ValueError: duplicate queues or an empty silo name.
        TypeError: a silo name is not a str.
    """
    names = set(silos)
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"silo names must be str, got {type(name).__name__}: {name!r}")
        if not name:
            raise ValueError("silo names must not be empty")
    if len(set(queues)) != len(queues):
        raise ValueError("queues must be distinct; a queue listed twice cannot have one owner")
    return sorted(names)


def silo_rank_key(name: str) -> tuple[int, str]:
    """A stable pseudo-random order of silos (ties in balancers are broken by it)."""
    return (stable_hash64("rank:" + name), name)


def build_assignment(
    queues: Sequence[QueueT], silos: Sequence[str], owners: Sequence[int]
) -> dict[QueueT, str]:
    """queue -> silo name from ``owners[i]`` = index into ``silos`` of the owner of queue i."""
    return dict(zip(queues, [silos[i] for i in owners], strict=True))
