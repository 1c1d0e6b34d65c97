"""The main benchmark rows on every installed Python, each ratio against its baseline
measured in the same run on that Python.

Usage::

    .venv/bin/python benchmarks/versions.py                 # every venv found, 3 rounds
    .venv/bin/python benchmarks/versions.py --rounds 1 --only grain_calls
    .venv/bin/python benchmarks/versions.py --python .venv/bin/python --python .venv-3.13/bin/python
    .venv/bin/python benchmarks/versions.py --against ../other-checkout --only grain_calls

Each round runs every benchmark script (``grain_calls.py``, ``streams.py``, ``cluster.py``,
with ``--json`` and their default settings) once under each interpreter, interpreters
interleaved within the round, so that a burst of machine noise spreads over all of them;
the servers a script spawns run on the same interpreter (``sys.executable``). The venvs are
the ones ``make test PYTHON=...`` installs: ``.venv`` and ``.venv-3.*``. The table gives, per
row and Python, the ratio of each round (``orleanspy / baseline``), then the median's
throughput; ``--json`` prints every figure instead. ``--against DIR`` also runs the scripts
of another checkout (its ``orleanspy`` first on ``PYTHONPATH``), interleaved with this one's
in every round: a before-and-after comparison on the same interpreters.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = {
    "grain_calls": ["benchmarks/grain_calls.py", "--json"],
    "streams": ["benchmarks/streams.py", "--json", "--only", "memory", "--only", "fanout",
                "--only", "sqlite", "--only", "backpressure"],
    "cluster": ["benchmarks/cluster.py", "--json"],
}


def interpreters() -> list[Path]:
    """The project's venvs, one per Python version (the default ``.venv`` first)."""
    found = [ROOT / ".venv" / "bin" / "python"]
    found += sorted(ROOT.glob(".venv-3.*/bin/python"))
    return [p for p in found if p.exists()]


def version_of(python: Path) -> str:
    out = subprocess.run([str(python), "-c", "import sys; print(sys.version.split()[0])"],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip()


def run(python: Path, script: list[str], tree: Path) -> list[dict[str, Any]]:
    env = dict(os.environ)
    if tree != ROOT:
        env["PYTHONPATH"] = str(tree)
    done = subprocess.run([str(python), *script], cwd=tree, capture_output=True, text=True,
                          timeout=900, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{python} {' '.join(script)} failed:\n{done.stderr[-2000:]}")
    figures: list[dict[str, Any]] = json.loads(done.stdout)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", action="append", type=Path,
                        help="an interpreter to run (repeatable; default: the venvs found)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", action="append", choices=sorted(SCRIPTS))
    parser.add_argument("--against", type=Path,
                        help="another checkout whose scripts run in every round too")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    pythons = args.python or interpreters()
    versions = {p: version_of(p) for p in pythons}
    scripts = args.only or list(SCRIPTS)
    trees = {ROOT: ""} if args.against is None else {
        args.against.resolve(): " against", ROOT: " this tree"}
    # results[column][row] = [figure of each round]; a column is a version (and a tree)
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for round_no in range(1, args.rounds + 1):
        for name in scripts:
            for python, version in versions.items():
                for tree, label in trees.items():
                    column = f"Python {version}{label}"
                    print(f"round {round_no}: {name} on {column}", file=sys.stderr, flush=True)
                    for figure in run(python, SCRIPTS[name], tree):
                        results.setdefault(column, {}).setdefault(
                            figure["name"], []).append(figure)
    if args.json:
        print(json.dumps(results))
        return
    rows = list(dict.fromkeys(r for v in results.values() for r in v))
    order = list(results)
    print("| figure | " + " | ".join(order) + " |")
    print("|---" * (len(order) + 1) + "|")
    for row in rows:
        cells = []
        for version in order:
            figures = results[version].get(row, [])
            if not figures:
                cells.append("-")
                continue
            ratios = " / ".join(f"{f['ratio']:.2f}" for f in figures)
            median = statistics.median(f["value"] for f in figures)
            cells.append(f"{ratios}x ({median:,.0f} {figures[0]['unit']})")
        print(f"| {row} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
