"""A compaction in a process of its own, for the kill -9 test: it prints each step it
reaches (``staged``, ``exchanged``, ``cleaned``) and, at the step named by argv[2], waits on
stdin (the test kills it there).

Run: ``python -m tests.spark.compact_app DATASET STEP``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from orleanspy.spark.compaction import CompactionOptions, compact


def main() -> None:
    dataset, stop_at = Path(sys.argv[1]), sys.argv[2]

    def on_step(step: str, partition: Path) -> None:
        sys.stdout.write(f"{step} {partition}\n")
        sys.stdout.flush()
        if step == stop_at:
            sys.stdin.readline()  # never answered: the test kills the process here

    compact(dataset, CompactionOptions(target_size=1 << 20, grace=0), on_step=on_step)
    sys.stdout.write("done\n")


if __name__ == "__main__":
    main()
