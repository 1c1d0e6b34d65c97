"""The typed surface: mypy --strict with ``orleanspy.mypy_plugin`` on a user-like module.

``usage_ok.py`` must type-check cleanly; every line of ``usage_errors.py`` marked
``# error: [code] text`` must give that error code with ``text`` in its message, and no other
line may give an error.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest
from mypy import api

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
MARKER = re.compile(r"#\s*error:\s*\[(?P<code>[a-z-]+)\]\s*(?P<text>.*)$")
REPORT = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+): error: (?P<msg>.*)  \[(?P<code>[a-z-]+)\]$")


@pytest.fixture(scope="module")
def mypy_errors() -> dict[str, list[tuple[int, str, str]]]:
    """mypy's errors per checked file name: (line, code, message)."""
    with contextlib.chdir(ROOT):  # mypy resolves ``tests.typing.grains`` from the repository root
        stdout, stderr, _status = api.run(
            [
                "--config-file", str(ROOT / "pyproject.toml"),
                "--cache-dir", str(ROOT / ".mypy_cache"),
                "--strict",
                "--show-error-codes",
                "--no-pretty",
                "--no-error-summary",
                str(HERE / "usage_ok.py"),
                str(HERE / "usage_errors.py"),
            ]
        )
    assert stderr == ""
    errors: dict[str, list[tuple[int, str, str]]] = {}
    for line in stdout.splitlines():
        m = REPORT.match(line)
        if m is not None:
            name = Path(m["path"]).name
            errors.setdefault(name, []).append((int(m["line"]), m["code"], m["msg"]))
        else:
            assert ": note: " in line, line  # notes only add context to an error
    return errors


def _expected(path: Path) -> dict[int, tuple[str, str]]:
    expected = {}
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        m = MARKER.search(text)
        if m is not None:
            expected[number] = (m["code"], m["text"].strip())
    return expected


@pytest.mark.timeout(600)
def test_mypy_plugin_correct_usage_type_checks(mypy_errors):
    assert mypy_errors.get("usage_ok.py", []) == []


@pytest.mark.timeout(600)
def test_mypy_plugin_reports_each_misuse(mypy_errors):
    expected = _expected(HERE / "usage_errors.py")
    reported = mypy_errors.get("usage_errors.py", [])

    assert {(line, code) for line, code, _ in reported} == {
        (line, code) for line, (code, _) in expected.items()
    }
    for line, code, message in reported:
        assert expected[line][1] in message, (line, code, message)
