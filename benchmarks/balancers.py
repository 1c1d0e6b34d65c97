"""Queue balancer simulation: balance and moves of every assigner against the optimum.

Usage::

    .venv/bin/python benchmarks/balancers.py            # table for humans + PASS/FAIL line
    .venv/bin/python benchmarks/balancers.py --json     # one JSON list (PASS/FAIL: stderr)
    .venv/bin/python benchmarks/balancers.py --quick    # fewer trials

Every assigner of ``orleanspy.streams.balancing`` runs on Q = 100,000 queues
(``QueueId("bench", i)``) over S = 10, 100 and 1,000 silos, and on Q = 8 queues (Orleans'
default count) over S = 2..8 silos. Per trial, with fresh random silo names (seeded):

1. ``base``: the layout of S silos from scratch (``previous=None``);
2. ``join``: one new silo joins; the layout is recomputed with ``previous=base``;
3. ``leave``: one random silo of ``base`` leaves; recomputed with ``previous=base``.

Figures per (assigner, Q, S), each against its optimum (the ``baseline``; ``ratio`` =
value / baseline):

* ``max_load``: the busiest silo as % of the average load, the worst over the three layouts
  of every trial; optimum: ``ceil(Q/S) / (Q/S)`` (exact balance) for the same layout.
* ``join_moves``: queues that changed owner on the join, mean over trials; optimum: the
  joiner's fair share ``floor(Q/(S+1))``, which is also ``minimum_moves`` (Q minus the most
  queues that can stay) when the start is exactly balanced.
* ``leave_moves``: the same for the leave; optimum: the departed silo's queues.

A ratio below 1 for moves means the assigner moved less than a balanced result needs: the
joiner got less than its share (see "joiner got"), paid for in balance.

The verdict, printed as one PASS/FAIL line: the default assigner is exactly
balanced in every layout and moves exactly ``minimum_moves`` (computed from the previous
layout, independently of the algorithm) on every join and leave; every bounded-load assigner
keeps every silo within ``ceil((1+eps) * Q/S)`` in every layout.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from _common import Figure, progress, report

from orleanspy.streams.balancing import (
    DEFAULT_ASSIGNER,
    BoundedLoadAssigner,
    ConsistentRingAssigner,
    EvenSplitAssigner,
    FixedSplitAssigner,
    QueueAssigner,
    StickyAssigner,
    is_exactly_balanced,
    load_cap,
    loads,
    minimum_moves,
    moved,
)
from orleanspy.streams.ids import QueueId

ASSIGNERS: list[QueueAssigner] = [
    FixedSplitAssigner(),
    ConsistentRingAssigner(30),
    EvenSplitAssigner(),
    StickyAssigner(),
    BoundedLoadAssigner(0.25),
    BoundedLoadAssigner(0.05),
]
LARGE = [(100_000, 10), (100_000, 100), (100_000, 1_000)]
SMALL = [(8, s) for s in range(2, 9)]


class MovesFigure(Figure):
    """A figure whose optimum may be 0 moves: ratio 1 when both are 0, null (None) otherwise."""

    __slots__ = ()

    @property
    def ratio(self) -> float:
        if self.baseline:
            return self.value / self.baseline
        return 1.0 if self.value == 0 else float("inf")

    def as_json(self) -> dict[str, Any]:
        out = super().as_json()
        if self.ratio == float("inf"):
            out["ratio"] = None  # JSON has no infinity
        return out


@dataclass(slots=True)
class Cell:
    """What one assigner did at one (Q, S) over all trials."""

    assigner: QueueAssigner
    queues: int
    silos: int
    trials: int = 0
    max_over_avg: float = 0.0  # worst over layouts and trials
    best_max_over_avg: float = 0.0  # exact balance, same layout
    idle_layouts: int = 0
    layouts: int = 0  # layouts with at least as many queues as silos (where idle is a fault)
    join_moves: int = 0
    join_optimum: int = 0
    joiner_got: int = 0
    leave_moves: int = 0
    leave_optimum: int = 0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)

    def figures(self) -> list[Figure]:
        t = max(self.trials, 1)
        stem = f"{self.assigner.name}/q{self.queues}/s{self.silos}"
        return [
            Figure(f"{stem}/max_load", 100 * self.max_over_avg, "% of average",
                   100 * self.best_max_over_avg, 1.0),
            MovesFigure(f"{stem}/join_moves", self.join_moves / t, "queues",
                        self.join_optimum / t, 1.0),
            MovesFigure(f"{stem}/leave_moves", self.leave_moves / t, "queues",
                        self.leave_optimum / t, 1.0),
        ]


def names(rng: random.Random, count: int) -> list[str]:
    """Random but seeded silo names, so sorted order says nothing about age."""
    return [f"10.0.{k // 250}.{k % 250}:{rng.getrandbits(32):08x}" for k in range(count)]


def check_layout(cell: Cell, layout: dict[QueueId, str], silos: list[str], what: str) -> None:
    per_silo = loads(layout, silos)
    q, s = len(layout), len(silos)
    if q != cell.queues:
        cell.failures.append(f"{what}: {q} of {cell.queues} queues owned")
    worst = max(per_silo.values())
    cell.max_over_avg = max(cell.max_over_avg, worst * s / q)
    cell.best_max_over_avg = max(cell.best_max_over_avg, -(-q // s) * s / q)
    if q >= s:
        cell.layouts += 1
        cell.idle_layouts += min(per_silo.values()) == 0
    assigner = cell.assigner
    if assigner is DEFAULT_ASSIGNER and not is_exactly_balanced(layout, silos):
        cell.failures.append(f"{what}: not exactly balanced (max {worst})")
    if isinstance(assigner, BoundedLoadAssigner) and worst > load_cap(q, s, assigner.epsilon):
        cell.failures.append(f"{what}: {worst} > cap {load_cap(q, s, assigner.epsilon)}")


def run_cell(assigner: QueueAssigner, q: int, s: int, trials: int, seed: int) -> Cell:
    cell = Cell(assigner, q, s)
    queues = [QueueId("bench", i) for i in range(q)]
    rng = random.Random(f"{seed}/{q}/{s}")  # the same silos for every assigner
    t0 = time.perf_counter()
    for trial in range(trials):
        silos = names(rng, s + 1)
        joiner, silos = silos[-1], silos[:-1]
        leaver = rng.choice(silos)
        joined = [*silos, joiner]
        left = [x for x in silos if x != leaver]

        base = assigner.assign(queues, silos)
        check_layout(cell, base, silos, f"trial {trial} base")
        after_join = assigner.assign(queues, joined, base)
        check_layout(cell, after_join, joined, f"trial {trial} join")
        after_leave = assigner.assign(queues, left, base)
        check_layout(cell, after_leave, left, f"trial {trial} leave")

        j, lv = moved(base, after_join), moved(base, after_leave)
        departed = loads(base, silos)[leaver]
        cell.join_moves += j
        cell.join_optimum += q // (s + 1)
        cell.joiner_got += loads(after_join, joined)[joiner]
        cell.leave_moves += lv
        cell.leave_optimum += departed
        if assigner is DEFAULT_ASSIGNER:
            need_j, need_l = minimum_moves(base, queues, joined), minimum_moves(base, queues, left)
            if j != need_j:
                cell.failures.append(f"trial {trial}: join moved {j}, minimum {need_j}")
            if lv != need_l:
                cell.failures.append(f"trial {trial}: leave moved {lv}, minimum {need_l}")
        cell.trials += 1
    cell.seconds = time.perf_counter() - t0
    return cell


def print_table(cells: list[Cell]) -> None:
    head = (
        f"{'balancer':<14} {'Q':>7} {'S':>5} {'trials':>6} {'max/avg':>8} {'best':>6} "
        f"{'idle%':>6} {'join moves':>11} {'opt':>8} {'x opt':>6} {'joiner/fair':>11} "
        f"{'leave moves':>11} {'opt':>8} {'x opt':>6} {'s/trial':>7}"
    )
    print(
        "max/avg: busiest silo / average, worst over trials and the base, join and leave layouts;"
        " best: the same under exact balance\n"
        "idle%: layouts (Q >= S) leaving a silo with no queue; opt: fewest moves (join: the"
        " joiner's fair share floor(Q/(S+1)); leave: the departed silo's queues); x opt: ratio"
    )
    last_q = None
    for c in cells:
        if c.queues != last_q:
            print()
            print(f"Q = {c.queues:,} queues" + (" (mean per trial)" if c.queues < 100 else ""))
            print(head)
            last_q = c.queues
        t = max(c.trials, 1)
        jo, lo = c.join_optimum / t, c.leave_optimum / t
        jr = MovesFigure("", c.join_moves, "", c.join_optimum, 1.0).ratio
        lr = MovesFigure("", c.leave_moves, "", c.leave_optimum, 1.0).ratio
        fair = f"{c.joiner_got / c.join_optimum:.2f}" if c.join_optimum else "-"
        print(
            f"{c.assigner.name:<14} {c.queues:>7,} {c.silos:>5,} {c.trials:>6} "
            f"{c.max_over_avg:>8.3f} {c.best_max_over_avg:>6.3f} "
            f"{100 * c.idle_layouts / max(c.layouts, 1):>5.0f}% "
            f"{c.join_moves / t:>11,.1f} {jo:>8,.1f} {jr:>6.2f} {fair:>11} "
            f"{c.leave_moves / t:>11,.1f} {lo:>8,.1f} {lr:>6.2f} {c.seconds / t:>7.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON list on stdout")
    parser.add_argument("--quick", action="store_true", help="1 large trial, 50 small ones")
    parser.add_argument("--trials", type=int, default=3, help="trials per size at Q=100,000")
    parser.add_argument("--small-trials", type=int, default=200, help="trials per size at Q=8")
    parser.add_argument("--seed", type=int, default=4)
    args = parser.parse_args()
    large_trials, small_trials = (1, 50) if args.quick else (args.trials, args.small_trials)

    cells: list[Cell] = []
    for q, s in LARGE + SMALL:
        trials = large_trials if q > 100 else small_trials
        for assigner in ASSIGNERS:
            cell = run_cell(assigner, q, s, trials, args.seed)
            progress(f"{assigner.name:<14} Q={q:<7} S={s:<5} {cell.seconds:6.2f}s")
            cells.append(cell)

    failures = [
        f"{c.assigner.name} Q={c.queues} S={c.silos}: {f}"
        for c in cells
        if c.assigner is DEFAULT_ASSIGNER or isinstance(c.assigner, BoundedLoadAssigner)
        for f in c.failures
    ]
    verdict = (
        f"PASS: default ({DEFAULT_ASSIGNER.name}) exactly balanced with minimal moves on every "
        "join and leave; bounded-load within ceil((1+eps)*avg) at every size"
        if not failures
        else f"FAIL: {len(failures)} violations; first: " + "; ".join(failures[:5])
    )
    if args.json:
        report([f for c in cells for f in c.figures()], as_json=True)
        print(verdict, file=sys.stderr)
    else:
        print_table(cells)
        print()
        print(verdict)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
