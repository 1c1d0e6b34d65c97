"""The option tables of the documents name the options that exist, with their defaults.

docs/configuration.md lists every ``SiloOptions`` field with the ``silo start`` flag that sets
it (blank, or the environment variable, for a field without one) and its default; docs/streams.md
lists every ``StreamProviderOptions`` field (``[streams.NAME]`` keys) and its default. A
field added, renamed or given another default without its table row fails here. Every TOML
example of the documents loads as a config file.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from orleanspy import ConfigurationError, SiloOptions
from orleanspy.streams.options import StreamProviderOptions
from silo.cli import build_parser
from silo.commands.silo_start import _FLAG_NAMES
from silo.config import load_config

ROOT = Path(__file__).resolve().parents[3]
SKIP = object()  # a default the table says in words ("CPU count", "the probe period")


def _table(document: str, header: str) -> list[list[str]]:
    """The rows (cells stripped) of the table of ``document`` whose header starts so."""
    lines = (ROOT / "docs" / document).read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def _value(cell: str, names: set[str]) -> Any:
    """The default a table cell states, or SKIP."""
    cell = re.sub(r"\s*\(.*\)$", "", cell).strip()
    if cell.lower() in ("none", "`none`"):
        return None
    if m := re.fullmatch(r"`?(true|false)`?", cell, re.I):
        return m.group(1).lower() == "true"
    if m := re.fullmatch(r"`?(\d[\d,]*(?:\.\d+)?)`?(?: s)?", cell):
        number = float(m.group(1).replace(",", ""))
        return int(number) if number.is_integer() else number
    if m := re.fullmatch(r"(\d+) MiB", cell):
        return int(m.group(1)) * 1024 * 1024
    if m := re.fullmatch(r"`([^`]*)`", cell):
        if m.group(1) in names:
            return SKIP  # the default is another field's value (advertise: `host`)
        return {} if m.group(1) == "{}" else m.group(1)
    return SKIP


def _default(cls: type, name: str) -> Any:
    """A field's declared default (before ``__post_init__`` converts it)."""
    (f,) = [f for f in dataclasses.fields(cls) if f.name == name]
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def _silo_start() -> argparse.ArgumentParser:
    parser = build_parser()
    silo = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    group = silo.choices["silo"]
    sub = next(a for a in group._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["start"]


def test_configuration_table_lists_every_silo_option_with_its_flag_and_default():
    rows = _table("configuration.md", "| field | flag | default |")
    fields = {f.name: f for f in dataclasses.fields(SiloOptions)}
    documented = [row[0] for row in rows]
    assert sorted(documented) == sorted(fields), "docs/configuration.md's table and SiloOptions"
    flags = {s for a in _silo_start()._actions for s in a.option_strings}
    defaults = SiloOptions()
    wrong = []
    for name, flag_cell, default_cell, *_ in rows:
        spelled = _FLAG_NAMES.get(name, "--" + name.replace("_", "-"))
        if name == "cluster_key":
            spelled = "--cluster-key-file"  # the key is read from a file
        real_flag = spelled if spelled in flags else None
        documented_flag = m.group(1) if (m := re.fullmatch(r"`(--[a-z-]+)`", flag_cell)) else None
        if documented_flag != real_flag:
            wrong.append(f"{name}: flag {documented_flag} documented, {real_flag} in silo start")
        variables = re.findall(r"ORLEANSPY_\w+", flag_cell)
        if variables not in ([], [f"ORLEANSPY_{name.upper()}"]):
            wrong.append(f"{name}: variable {variables} documented, ORLEANSPY_{name.upper()} "
                         "is read")
        stated = _value(default_cell.removeprefix("CLI: `sqlite:orleanspy.db`; in-process: "),
                        set(fields))
        if stated is not SKIP and stated != getattr(defaults, name):
            wrong.append(f"{name}: default {default_cell} documented, "
                         f"{getattr(defaults, name)!r} in SiloOptions")
    assert not wrong, "\n".join(wrong)


def test_streams_table_lists_every_provider_option_with_its_default():
    rows = _table("streams.md", "| option | default | meaning |")
    fields = {f.name for f in dataclasses.fields(StreamProviderOptions) if f.init}
    documented: list[str] = []
    wrong = []
    for names_cell, default_cell, *_ in rows:
        names = re.findall(r"`(\w+)`", names_cell)
        values = default_cell.split(" / ")
        documented.extend(names)
        for name, cell in zip(names, values if len(values) == len(names) else [""] * len(names),
                              strict=True):
            if name not in fields:
                continue
            stated = _value(cell, fields)
            if stated is not SKIP and stated != _default(StreamProviderOptions, name):
                wrong.append(f"{name}: default {cell} documented, "
                             f"{_default(StreamProviderOptions, name)!r} in "
                             "StreamProviderOptions")
    assert sorted(documented) == sorted(fields), "docs/streams.md's table and the options"
    assert not wrong, "\n".join(wrong)


def _toml_blocks() -> list[tuple[str, str]]:
    blocks = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for match in re.finditer(r"^```toml\n(.*?)^```", text, re.S | re.M):
            if match.group(1).lstrip().startswith("[tool."):
                continue  # a pyproject.toml fragment
            line = text.count("\n", 0, match.start()) + 1
            blocks.append((f"{path.relative_to(ROOT)}:{line}", match.group(1)))
    return blocks


@pytest.mark.parametrize(("where", "block"), _toml_blocks(), ids=lambda v: v.split("\n")[0])
def test_each_toml_example_of_the_documents_loads(where: str, block: str, tmp_path: Path):
    path = tmp_path / "orleanspy.toml"
    path.write_text(block, encoding="utf-8")
    try:
        load_config(path, {}, environ={})
    except ConfigurationError as exc:
        pytest.fail(f"{where}: the example does not load: {exc}")
