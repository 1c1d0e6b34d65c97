"""The ``orleanspy ...`` commands that README.md and docs/*.md show, as argument lists.

A command is a line of a fenced code block that starts with ``orleanspy`` (or
``.venv/bin/orleanspy``; ``\\`` continues it, `` # ...`` ends it), or an inline code span
that starts with ``orleanspy `` (it may wrap a line). A synopsis is expanded: ``[...]`` is
taken both without and with its contents, ``a|b|c`` once per alternative, ``...`` is
dropped. Placeholders (``PROVIDER``, ``TYPE``, ``HOST:PORT``...) become sample values from
``PLACEHOLDERS``; a placeholder missing there is an error, so a new one must be added.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DOCUMENTS", "OUTPUT_LINES", "PLACEHOLDERS", "DocCommand", "doc_commands",
           "flag_mentions"]

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: Lines the silo prints, quoted in the docs: output, not commands.
OUTPUT_LINES = ("orleanspy silo ready", "orleanspy silo dashboard", "orleanspy silo cluster")

#: Sample values of the placeholders the docs write in commands.
PLACEHOLDERS: dict[str, str] = {
    "PROVIDER": "events",
    "NS": "clicks",
    "KEY": "alice",
    "ID": "no-such-subscription",
    "TYPE": "Account",
    "GRAIN_TYPE": "Account",
    "GRAIN": "Account",
    "METHOD": "deposit",
    "ARGS": "10",
    "SILO": "127.0.0.1:11111",
    "HOST:PORT": "127.0.0.1:30000",
    "HOST": "127.0.0.1",
    "PORT": "0",
    "SECONDS": "0",
    "N": "5",
    "URL": "sqlite:cluster.db",
    "FILE": "orleanspy.toml",
    "DIR": ".orleanspy",
    "MODULE": "myapp.grains",
    "KEY=VALUE": "spark.sql.shuffle.partitions=4",
    "TYPE/KEY": "Account/alice",
    "<that host's address>": "127.0.0.1",
}

_FENCE = re.compile(r"^(\s*)(```|~~~)")
_SPAN = re.compile(r"`([^`]+)`")
_COMMAND = re.compile(r"orleanspy [a-z]")
_ANGLED = re.compile(r"<[^<>]+>")
_PLACEHOLDER = re.compile(r"^[A-Z][A-Z_:=/]*$")
_OPTIONAL = re.compile(r"(?:(?<=\s)|^)\[([^\[\]]*)\](?:\.\.\.|…)?")


@dataclass(frozen=True)
class DocCommand:
    """One command as a document shows it, and the argument lists it stands for."""

    where: str  # path:line
    text: str  # as written (continuations joined)
    inline: bool  # an inline code span (else a line of a code block)
    argvs: tuple[tuple[str, ...], ...]  # after ``orleanspy``, placeholders substituted


def _expand(text: str) -> list[str]:
    """The variants of a synopsis: each ``[...]`` without and with its contents."""
    match = _OPTIONAL.search(text)
    if match is None:
        return [text]
    before, after = text[:match.start()], text[match.end():]
    return [*_expand(before + after), *_expand(before + match.group(1) + after)]


def _sample(placeholder: str, text: str, where: str) -> str:
    if placeholder not in PLACEHOLDERS:
        raise AssertionError(f"{where}: placeholder {placeholder} in {text!r} has no sample "
                             "value: add it to PLACEHOLDERS")
    return PLACEHOLDERS[placeholder]


def _argvs(text: str, where: str) -> tuple[tuple[str, ...], ...]:
    argvs: list[tuple[str, ...]] = []
    for variant in _expand(text):
        variant = variant.replace("...", " ").replace("…", " ")
        variant = _ANGLED.sub(lambda m: _sample(m.group(0), text, where), variant)
        tokens = shlex.split(variant)[1:]  # without "orleanspy"
        expanded: list[list[str]] = [[]]
        for token in tokens:
            choices = token.split("|") if "|" in token and not token.startswith("-") else [token]
            values = []
            for choice in choices:
                if _PLACEHOLDER.fullmatch(choice):
                    choice = _sample(choice, text, where)
                values.append(choice)
            expanded = [[*argv, value] for argv in expanded for value in values]
        argvs.extend(tuple(argv) for argv in expanded)
    return tuple(dict.fromkeys(argvs))


def _block_commands(path: Path, lines: list[str]) -> list[DocCommand]:
    found: list[DocCommand] = []
    in_fence = False
    pending: list[str] = []
    start = 0
    for number, line in enumerate(lines, 1):
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            continue
        text = line.strip()
        if not pending:
            text = text.removeprefix("$ ").removeprefix(".venv/bin/")
            if not text.startswith("orleanspy "):
                continue
            start = number
        text = re.sub(r"\s#\s.*$", "", text)
        if text.endswith("\\"):
            pending.append(text[:-1])
            continue
        full = " ".join([*pending, text]).strip()
        pending = []
        if full.startswith(OUTPUT_LINES):
            continue
        where = f"{path.relative_to(ROOT)}:{start}"
        found.append(DocCommand(where, full, False, _argvs(full, where)))
    return found


def _prose_lines(lines: list[str]) -> list[tuple[int, str]]:
    """(line number, line) of the lines outside code blocks."""
    out: list[tuple[int, str]] = []
    in_fence = False
    for number, line in enumerate(lines, 1):
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            out.append((number, line))
    return out


def _paragraphs(lines: list[str]) -> list[tuple[int, str]]:
    """(first line, text joined with spaces) of each paragraph or list item of the prose."""
    paragraphs: list[tuple[int, str]] = []
    current: list[str] = []
    first = 0
    for number, line in _prose_lines(lines):
        item = re.match(r"^\s*([-*]|\d+\.)\s", line) is not None
        if not line.strip() or item or line.startswith(("#", "|")):
            if current:
                paragraphs.append((first, " ".join(current)))
            current = []
            if not line.strip() or line.startswith(("#", "|")):
                if line.startswith("|"):
                    paragraphs.append((number, line))
                continue
        if not current:
            first = number
        current.append(line.strip())
    if current:
        paragraphs.append((first, " ".join(current)))
    return paragraphs


def _inline_commands(text: str) -> list[str]:
    """The inline code spans of ``text`` that are ``orleanspy`` commands."""
    spans = (" ".join(span.split()) for span in _SPAN.findall(text))
    return [span for span in spans
            if _COMMAND.match(span) and not span.startswith(OUTPUT_LINES)]


def doc_commands() -> list[DocCommand]:
    """Every ``orleanspy`` command of the documents, in document order."""
    found: list[DocCommand] = []
    for path in DOCUMENTS:
        lines = path.read_text(encoding="utf-8").splitlines()
        found.extend(_block_commands(path, lines))
        for first, text in _paragraphs(lines):
            for command in _inline_commands(text):
                where = f"{path.relative_to(ROOT)}:{first}"
                found.append(DocCommand(where, command, True, _argvs(command, where)))
    return found


def flag_mentions() -> list[tuple[str, list[DocCommand], str]]:
    """(where, the commands of the paragraph, flag) for each inline code span that starts
    with a flag (``--interval SECONDS``) in a paragraph or list item that shows ``orleanspy``
    commands."""
    mentions: list[tuple[str, list[DocCommand], str]] = []
    for path in DOCUMENTS:
        lines = path.read_text(encoding="utf-8").splitlines()
        for first, text in _paragraphs(lines):
            where = f"{path.relative_to(ROOT)}:{first}"
            commands = [DocCommand(where, command, True, _argvs(command, where))
                        for command in _inline_commands(text)]
            if not commands:
                continue
            mentions.extend((where, commands, span.split()[0])
                            for span in _SPAN.findall(text) if span.startswith("--"))
    return mentions
