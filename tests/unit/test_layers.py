"""The package structure: no import hidden in a function or under TYPE_CHECKING closes a cycle.

import-linter (``make test``, contracts in pyproject.toml) keeps the packages layered; this
test keeps the modules inside one package acyclic too. An import placed in a function or
under ``TYPE_CHECKING`` is allowed for start-up cost or annotations, but never to let two
modules import each other: that is a missing seam.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("orleanspy", "silo")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> tuple[set[str], list[tuple[str, str, str]]]:
    files = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    modules = {_module_name(p) for p in files}
    edges: list[tuple[str, str, str]] = []
    for path in files:
        name = _module_name(path)
        is_pkg = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))

        def resolve(node: ast.ImportFrom, name: str = name, is_pkg: bool = is_pkg) -> str:
            if not node.level:
                return node.module or ""
            base = name.split(".") if is_pkg else name.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            return ".".join([*base, *([node.module] if node.module else [])])

        def visit(node: ast.AST, where: str, name: str = name) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                    for stmt in child.body:
                        visit_stmt(stmt, "type-checking")
                    for stmt in child.orelse:
                        visit_stmt(stmt, where)
                    continue
                visit_stmt(child, where)

        def visit_stmt(stmt: ast.AST, where: str, name: str = name) -> None:
            if isinstance(stmt, ast.ImportFrom):
                base = resolve(stmt)
                for alias in stmt.names:
                    full = f"{base}.{alias.name}"
                    edges.append((name, full if full in modules else base, where))
            elif isinstance(stmt, ast.Import):
                edges.extend((name, alias.name, where) for alias in stmt.names)
            else:
                inner = (
                    "function"
                    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
                    else where
                )
                visit(stmt, inner)

        visit(tree, "top")
    ours = [(a, b, w) for a, b, w in edges if b.split(".")[0] in PACKAGES]
    return modules, ours


def _reaches(top: dict[str, set[str]], start: str, goal: str) -> bool:
    """Does importing ``start`` at run time import ``goal`` (top-level imports only)?

    Importing ``a.b.c`` also runs ``a.b``'s ``__init__``, except for packages ``goal`` sits
    in: those are already being imported when ``goal`` is.
    """
    parts = goal.split(".")
    enclosing = {".".join(parts[:i]) for i in range(1, len(parts))}
    seen: set[str] = set()
    stack = [start]
    while stack:
        module = stack.pop()
        if module == goal:
            return True
        if module in seen:
            continue
        seen.add(module)
        for target in top.get(module, ()):
            stack.append(target)
            pieces = target.split(".")
            stack.extend(
                p for i in range(2, len(pieces))
                if (p := ".".join(pieces[:i])) not in enclosing
            )
    return False


def _own_export(source: str, target: str, where: str) -> bool:
    """A package naming one of its own modules' exports for type checkers (it imports them
    on first use, ``_util.lazy``): importing the module runs the package first anyway."""
    return where == "type-checking" and target.startswith(source + ".")


def test_no_deferred_import_closes_an_import_cycle():
    _, edges = _imports()
    top: dict[str, set[str]] = defaultdict(set)
    for source, target, where in edges:
        if where == "top":
            top[source].add(target)
    cycles = sorted(
        f"{source} -> {target} ({where})"
        for source, target, where in edges
        if where != "top" and not _own_export(source, target, where)
        and _reaches(top, target, source)
    )
    assert cycles == [], (
        "these imports are deferred only because the two modules import each other; "
        "give the lower one a protocol or pass the dependency in:\n" + "\n".join(cycles)
    )


def test_no_module_level_mutable_registry():
    """Components keep their state on themselves or on the silo that owns them. A memo of a
    pure function of its key (a dict named ``*_cache``) and a free list of interchangeable
    objects (a list named ``*_spare``) are the exceptions."""
    offenders = []
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for stmt in tree.body:
                value = getattr(stmt, "value", None)
                if not isinstance(stmt, ast.Assign | ast.AnnAssign) or value is None:
                    continue
                text = ast.unparse(value)
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                names = [ast.unparse(t) for t in targets]
                if any(n == "__all__" or n.endswith(("_cache", "_spare")) for n in names):
                    continue
                if text in ("{}", "[]", "set()", "dict()") or text.startswith(
                    ("weakref.", "WeakKeyDictionary(", "WeakValueDictionary(", "defaultdict(")
                ):
                    offenders.append(f"{path.relative_to(ROOT)}: {', '.join(names)} = {text}")
    assert offenders == [], "module-level mutable state:\n" + "\n".join(offenders)
