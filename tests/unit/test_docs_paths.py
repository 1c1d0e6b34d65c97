"""The documents name code that exists.

README.md, docs/*.md and the docstrings and comments of the code (orleanspy/, silo/,
examples/, benchmarks/) name modules by path (``orleanspy/runtime/turns.py``, or
``runtime/turns.py`` inside the package) and objects by dotted name
(``orleanspy.cluster.config.membership_options_of``). These tests resolve each one against
the source tree, without importing anything, and check that the module map of
docs/architecture.md names every module of the package.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "orleanspy"
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SOURCES = sorted(path for folder in ("orleanspy", "silo", "examples", "benchmarks")
                 for path in (ROOT / folder).rglob("*.py"))
#: Folders at the top of the repository that a document may name paths in.
TOP_LEVEL = {"orleanspy", "silo", "examples", "benchmarks", "tests", "scripts", "docs"}
#: Subpackages of orleanspy, named without the ``orleanspy/`` prefix in the documents.
SUBPACKAGES = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}

PATH = re.compile(r"(?<![\w/.{-])((?:\w+/)+\w+\.py)\b")
DOTTED = re.compile(r"(?<![\w.])(orleanspy(?:\.\w+)+)")
#: ``orleanspy.db``, ``orleanspy.toml``: file names, not modules.
FILE_SUFFIXES = {"db", "toml", "log", "sqlite", "json"}


@cache
def _prose() -> tuple[tuple[str, str], ...]:
    """(where, line) of every line of the documents, and of every docstring and comment."""
    lines = [
        (f"{doc.relative_to(ROOT)}:{number}", line)
        for doc in DOCUMENTS
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1)
    ]
    for source in SOURCES:
        text = source.read_text(encoding="utf-8")
        where = source.relative_to(ROOT)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef
                          | ast.AsyncFunctionDef) and ast.get_docstring(node) is not None:
                first = node.body[0].lineno
                lines += [(f"{where}:{first + offset}", line) for offset, line
                          in enumerate((ast.get_docstring(node) or "").splitlines())]
        lines += [(f"{where}:{token.start[0]}", token.string)
                  for token in tokenize.generate_tokens(io.StringIO(text).readline)
                  if token.type == tokenize.COMMENT]
    return tuple(lines)


def _mentions(pattern: re.Pattern[str]) -> list[tuple[str, str]]:
    return [(where, match.group(1)) for where, line in _prose()
            for match in pattern.finditer(line)]


def _path_exists(path: str) -> bool | None:
    """True or False for a path inside the repository; None for one that names no folder of
    it (an application's file in an example, such as ``shop/grains.py``)."""
    first = path.split("/", 1)[0]
    if first in TOP_LEVEL:
        return (ROOT / path).exists()
    if first in SUBPACKAGES:
        return (PACKAGE / path).exists()
    return None


def test_every_path_a_document_names_exists() -> None:
    checked = 0
    missing = []
    for where, path in _mentions(PATH):
        exists = _path_exists(path)
        if exists is None:
            continue
        checked += 1
        if not exists:
            missing.append(f"{where}: {path}")
    assert checked > 100, "the pattern no longer finds the documents' paths"
    assert not missing, "documents name files that do not exist:\n" + "\n".join(missing)


@cache
def _module_names(module: Path) -> dict[str, ast.AST | None]:
    """Top-level names a module defines or imports (classes map to their node), including
    a package's lazily imported exports (named by its ``if TYPE_CHECKING:`` imports)."""
    tree = ast.parse(module.read_text(encoding="utf-8"))
    names: dict[str, ast.AST | None] = {}
    body = list(tree.body)
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and (
                node.test.id == "TYPE_CHECKING"):
            body.extend(node.body)
    for node in body:
        if isinstance(node, ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names[node.name] = None
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = None
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = None
        elif isinstance(node, ast.ImportFrom | ast.Import):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = None
    return names


def _class_has(node: ast.ClassDef, name: str) -> bool:
    for item in node.body:
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if item.name == name:
                return True
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            if item.target.id == name:
                return True
        elif isinstance(item, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in item.targets):
            return True
    return False


@cache
def _runtime_type_names() -> frozenset[str]:
    """Grain type names the runtime takes for its own grains (``"orleanspy.StreamPublisher"``):
    a document may name them, and a method of theirs, although no module has that path."""
    found = set()
    for source in PACKAGE.rglob("*.py"):
        found.update(re.findall(r"\"(orleanspy\.[A-Z]\w*)\"", source.read_text(encoding="utf-8")))
    return frozenset(found)


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    if parts[1] in FILE_SUFFIXES:
        return True
    if ".".join(parts[:2]) in _runtime_type_names():
        return True
    for length in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:length])
        module = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if not module.exists():
            continue
        rest = parts[length:]
        if not rest:
            return True
        names = _module_names(module)
        if rest[0] not in names:
            # a submodule that is a package's attribute once imported
            return (base / rest[0]).with_suffix(".py").exists() and len(rest) == 1
        node = names[rest[0]]
        if len(rest) == 1 or node is None:
            return True  # an imported name or a value: its attributes are not followed
        return isinstance(node, ast.ClassDef) and len(rest) == 2 and _class_has(node, rest[1])
    return False


def test_every_dotted_name_a_document_names_resolves() -> None:
    mentions = _mentions(DOTTED)
    assert len(mentions) > 50, "the pattern no longer finds the documents' dotted names"
    unresolved = [f"{where}: {name}" for where, name in mentions if not _resolves(name)]
    assert not unresolved, "documents name what the code does not define:\n" + "\n".join(
        unresolved)


def _module_map() -> dict[str, set[str]]:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## Module map", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].startswith("`") and cells[0].endswith("/`"):
            package = cells[0].strip("`").removeprefix("orleanspy/")
            rows[package] = set(re.findall(r"`(\w+)`", re.sub(r"\([^()]*\)", "", cells[1])))
    return rows


def test_the_module_map_names_every_module() -> None:
    rows = _module_map()
    missing = []
    for source in sorted(PACKAGE.rglob("*.py")):
        relative = source.relative_to(PACKAGE)
        package = "" if relative.parent == Path(".") else f"{relative.parent.as_posix()}/"
        if relative.name == "__init__.py" and package:
            continue
        if source.stem not in rows.get(package, set()):
            missing.append(relative.as_posix())
    unknown = [f"{package}{module}.py" for package, modules in rows.items()
               for module in modules if not (PACKAGE / package / f"{module}.py").exists()]
    assert not missing, "docs/architecture.md's module map leaves out:\n" + "\n".join(missing)
    assert not unknown, "docs/architecture.md's module map names:\n" + "\n".join(unknown)


@pytest.mark.parametrize("name", ["runtime/states.py", "orleanspy.runtime.states.reply_to"])
def test_a_stale_name_is_caught(name: str) -> None:
    if name.endswith(".py"):
        assert _path_exists(name) is False
    else:
        assert not _resolves(name)
