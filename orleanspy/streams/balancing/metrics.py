"""Measures of an assignment: loads, balance, moves, and the fewest moves a change needs.

Used by the tests, benchmarks/balancers.py and the dashboard; independent of the algorithms.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence

__all__ = ["is_exactly_balanced", "loads", "minimum_moves", "moved"]


def loads(assignment: Mapping[Hashable, str], silos: Iterable[str]) -> dict[str, int]:
    """Queues per silo, with 0 for a silo of ``silos`` that owns none.

    Raises:
        ValueError: an owner in ``assignment`` is not one of ``silos``.
    """
    counts = dict.fromkeys(silos, 0)
    for silo, count in Counter(assignment.values()).items():
        if silo not in counts:
            raise ValueError(f"queues are assigned to {silo!r}, which is not an active silo")
        counts[silo] = count
    return counts


def is_exactly_balanced(assignment: Mapping[Hashable, str], silos: Iterable[str]) -> bool:
    """Every silo holds ``floor(Q/S)`` or ``ceil(Q/S)`` queues (``Q = len(assignment)``)."""
    per_silo = loads(assignment, silos)
    if not per_silo:
        return not assignment
    low = len(assignment) // len(per_silo)
    return all(low <= n <= low + 1 for n in per_silo.values())


def moved(previous: Mapping[Hashable, str], current: Mapping[Hashable, str]) -> int:
    """Queues that changed owner: had an owner in ``previous`` and have another in ``current``."""
    get = previous.get
    return sum(
        1 for queue, silo in current.items() if (was := get(queue)) is not None and was != silo
    )


def minimum_moves(
    previous: Mapping[Hashable, str], queues: Sequence[Hashable], silos: Iterable[str]
) -> int:
    """The fewest moves that take ``previous`` to an exactly balanced assignment over ``silos``.

    Each active silo s keeps at most ``min(c_s, t_s)`` of its ``c_s`` queues, where its target
    ``t_s`` is ``floor(Q/S)`` plus 1 for ``Q mod S`` silos; the sum is largest when the extra
    slots go to the silos with the largest ``c_s``. Every queue with a previous owner that is
    not kept moves (those of departed silos included); queues without one are not moves.
    For a join to S balanced silos this is ``floor(Q/(S+1))`` (the joiner's share); for a
    leave from a balanced layout, the departed silo's queues.
    """
    names = set(silos)
    if not names:
        return 0
    held = Counter(previous[q] for q in queues if q in previous)
    owned_before = sum(held.values())
    counts = sorted((held.get(s, 0) for s in names), reverse=True)
    base, extra = divmod(len(queues), len(names))
    kept = sum(min(c, base + 1 if i < extra else base) for i, c in enumerate(counts))
    return owned_before - kept
