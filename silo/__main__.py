"""``python -m silo``: the same command line as the ``orleanspy`` console script."""

from __future__ import annotations

from silo.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
