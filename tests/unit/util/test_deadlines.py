"""One timer for many waits: an overdue wait expires once, within the granularity; a wait
removed in time never expires; the timer stops when nothing waits."""

from __future__ import annotations

from typing import Any

from orleanspy._util.deadlines import Deadlines
from orleanspy.testing import FakeClock


def test_overdue_waits_expire_once_and_removed_ones_never() -> None:
    clock = FakeClock()
    fired: list[tuple[Any, Any, float]] = []
    deadlines = Deadlines(clock.call_later, clock.monotonic,
                          lambda a, b, t: fired.append((a, b, t)), granularity=0.1)
    start = clock.monotonic()
    deadlines.add(1, start + 1.0, "a", "x", 1.0)
    deadlines.add(2, start + 1.0, "b", "y", 1.0)
    deadlines.add(3, start + 5.0, "c", "z", 5.0)
    deadlines.remove(2)
    clock.advance(0.95)
    assert fired == []
    clock.advance(0.2)  # past the deadline, within one granularity
    assert fired == [("a", "x", 1.0)]
    assert len(deadlines) == 1
    clock.advance(10.0)
    assert fired == [("a", "x", 1.0), ("c", "z", 5.0)]
    assert len(deadlines) == 0
    assert clock.pending_timers == 0  # nothing waits: no timer


def test_a_wait_added_after_the_sweep_stopped_rearms_it() -> None:
    clock = FakeClock()
    fired: list[Any] = []
    deadlines = Deadlines(clock.call_later, clock.monotonic, lambda a, b, t: fired.append(a))
    deadlines.add("k", clock.monotonic() + 1.0, 1, None, 1.0)
    clock.advance(2.0)
    deadlines.add("k2", clock.monotonic() + 1.0, 2, None, 1.0)
    clock.advance(2.0)
    assert fired == [1, 2]
