"""Subscription filters: a small expression over an event's fields and the stream key.

A filter is data, never code: the subscriber gives a text (``subscribe(..., filter=...)``),
the stream's rendezvous keeps it with the subscription, and the pulling agent parses it with
the grammar below and evaluates it on each decoded event before delivery. An event it rejects
costs the consumer nothing: no message, no grain turn (the agent counts it as ``filtered``).

Grammar (at most ``MAX_LENGTH`` characters and ``MAX_TERMS`` values)::

    filter     := or_expr
    or_expr    := and_expr ("or" and_expr)*
    and_expr   := not_expr ("and" not_expr)*
    not_expr   := "not" not_expr | comparison
    comparison := value [("==" | "!=" | "<" | "<=" | ">" | ">=" | "in") value]
    value      := literal | path | "(" or_expr ")" | "[" [literal ("," literal)*] "]"
    path       := ("event" | "key") ("." NAME | "[" (STRING | INTEGER) "]")*
    literal    := INTEGER | FLOAT | STRING | "true" | "false" | "null"

``event`` is the event, ``key`` the stream key. ``.name`` reads a dict's entry ``"name"`` or
a dataclass field (names starting with ``_`` are refused); ``[x]`` a dict entry or a list or
tuple index. What is not there is ``null``. STRING is a JSON string in double quotes. A
comparison whose sides cannot be ordered (``null < 1``, ``"a" < 1``) is false, as is ``in``
over a value that is not a list, tuple, set, dict or string; a value alone is tested for
truth. Examples: ``event.kind == "click" and event.ms >= 250``,
``key in ["eu-1", "eu-2"] or not event.internal``.
"""

from __future__ import annotations

import dataclasses
import json
import operator
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Final, NoReturn

__all__ = ["MAX_LENGTH", "MAX_TERMS", "FilterError", "Match", "compile_filter"]

MAX_LENGTH: Final = 512
MAX_TERMS: Final = 64

#: a compiled filter: ``match(event, key)`` is True for the events to deliver
Match = Callable[[Any, Any], bool]
_Value = Callable[[Any, Any], Any]

_TOKENS: Final = re.compile(r"""
    \s*(?:
      (?P<num>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
    | (?P<str>"(?:[^"\\]|\\.)*")
    | (?P<op>==|!=|<=|>=|<|>|\(|\)|\[|\]|,|\.)
    | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
    )""", re.VERBOSE)
_COMPARE: Final[dict[str, Callable[[Any, Any], Any]]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
    ">": operator.gt, ">=": operator.ge,
}
_LITERALS: Final = {"true": True, "false": False, "null": None}
_CONTAINERS: Final = (list, tuple, set, frozenset, dict, str)
_HELP: Final = ('a filter compares event fields or the stream key with literals, e.g. '
                'event.kind == "click" and key in ["a", "b"] (see docs/streams.md, Filters)')


class FilterError(ValueError):
    """A filter text that is not valid: the message names the problem and the grammar."""


@lru_cache(maxsize=256)
def compile_filter(text: str) -> Match:
    """Parse ``text`` (see the module's grammar) into ``match(event, key) -> bool``.

    Raises:
        FilterError: ``text`` is not a str, longer than ``MAX_LENGTH``, or not valid.
    """
    if not isinstance(text, str):
        raise FilterError(f"filter must be a str, got {type(text).__name__}; {_HELP}")
    if len(text) > MAX_LENGTH:
        raise FilterError(f"filter is {len(text)} characters, more than {MAX_LENGTH}: keep "
                          "it short (filter on a field the producer sets for the purpose)")
    value = _Parser(text).parse()
    return lambda event, key: bool(value(event, key))


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, str, int]] = []
        pos = 0
        while pos < len(text):
            m = _TOKENS.match(text, pos)
            if m is None or m.end() == pos:
                if text[pos:].strip() == "":
                    break
                self.fail(pos + len(text[pos:]) - len(text[pos:].lstrip()), "unexpected text")
            assert m is not None
            kind = m.lastgroup
            assert kind is not None
            self.tokens.append((kind, m.group(kind), m.start(kind)))
            pos = m.end()
        self.i = 0
        self.terms = 0

    def fail(self, pos: int, problem: str) -> NoReturn:
        raise FilterError(f"filter {self.text!r} at {pos}: {problem}; {_HELP}")

    def peek(self) -> tuple[str, str, int] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, *texts: str) -> str | None:
        tok = self.peek()
        if tok is not None and tok[0] in ("op", "name") and tok[1] in texts:
            self.i += 1
            return tok[1]
        return None

    def expect(self, text: str) -> None:
        if self.take(text) is None:
            tok = self.peek()
            self.fail(tok[2] if tok else len(self.text),
                      f"expected {text!r}, found {tok[1] if tok else 'the end'!r}")

    def parse(self) -> _Value:
        value = self.or_expr(0)
        tok = self.peek()
        if tok is not None:
            self.fail(tok[2], f"unexpected {tok[1]!r}")
        return value

    def or_expr(self, depth: int) -> _Value:
        parts = [self.and_expr(depth)]
        while self.take("or"):
            parts.append(self.and_expr(depth))
        if len(parts) == 1:
            return parts[0]
        return lambda e, k: any(p(e, k) for p in parts)

    def and_expr(self, depth: int) -> _Value:
        parts = [self.not_expr(depth)]
        while self.take("and"):
            parts.append(self.not_expr(depth))
        if len(parts) == 1:
            return parts[0]
        return lambda e, k: all(p(e, k) for p in parts)

    def not_expr(self, depth: int) -> _Value:
        if self.take("not"):
            inner = self.not_expr(depth + 1)
            return lambda e, k: not inner(e, k)
        return self.comparison(depth)

    def comparison(self, depth: int) -> _Value:
        left = self.value(depth)
        op = self.take(*_COMPARE, "in")
        if op is None:
            return left
        right = self.value(depth)
        if op == "in":
            return lambda e, k: _contains(right(e, k), left(e, k))
        compare = _COMPARE[op]
        return lambda e, k: _compare(compare, left(e, k), right(e, k))

    def value(self, depth: int) -> _Value:
        self.terms += 1
        tok = self.peek()
        if tok is None:
            self.fail(len(self.text), "the filter ends where a value is expected")
        assert tok is not None
        if self.terms > MAX_TERMS or depth > MAX_TERMS:
            self.fail(tok[2], f"more than {MAX_TERMS} values: keep filters small")
        if self.take("("):
            inner = self.or_expr(depth + 1)
            self.expect(")")
            return inner
        if self.take("["):
            items: list[Any] = []
            if not self.take("]"):
                items.append(self.literal())
                while self.take(","):
                    items.append(self.literal())
                self.expect("]")
            frozen = tuple(items)
            return lambda e, k: frozen
        if tok[0] == "name" and tok[1] in ("event", "key"):
            self.i += 1
            return self.path(tok[1] == "event")
        constant = self.literal()
        return lambda e, k: constant

    def literal(self) -> Any:
        tok = self.peek()
        if tok is None:
            self.fail(len(self.text), "the filter ends where a literal is expected")
        assert tok is not None
        kind, text, pos = tok
        self.i += 1
        if kind == "num":
            return float(text) if any(c in text for c in ".eE") else int(text)
        if kind == "str":
            try:
                return json.loads(text)
            except ValueError:
                self.fail(pos, f"{text} is not a valid JSON string")
        if kind == "name" and text in _LITERALS:
            return _LITERALS[text]
        self.fail(pos, f"unexpected {text!r} (names are event, key, true, false, null)")

    def path(self, of_event: bool) -> _Value:
        steps: list[Any] = []
        while True:
            if self.take("."):
                tok = self.peek()
                if tok is None or tok[0] != "name" or tok[1].startswith("_"):
                    self.fail(tok[2] if tok else len(self.text),
                              "expected a field name not starting with '_' after '.'")
                assert tok is not None
                self.i += 1
                steps.append(tok[1])
            elif self.take("["):
                tok = self.peek()
                step = self.literal()
                if not isinstance(step, (str, int)) or isinstance(step, bool):
                    self.fail(tok[2] if tok else len(self.text),
                              "an index is a string or an integer")
                steps.append(step)
                self.expect("]")
            else:
                break
        path = tuple(steps)
        if of_event:
            return (lambda e, k: _walk(e, path)) if path else (lambda e, k: e)
        return (lambda e, k: _walk(k, path)) if path else (lambda e, k: k)


def _walk(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        if isinstance(value, dict):
            value = value.get(step)
        elif isinstance(step, int) and isinstance(value, (list, tuple)):
            value = value[step] if -len(value) <= step < len(value) else None
        elif (isinstance(step, str) and dataclasses.is_dataclass(value)
              and not isinstance(value, type)
              and step in {f.name for f in dataclasses.fields(value)}):
            value = getattr(value, step)
        else:
            return None
    return value


def _compare(compare: Callable[[Any, Any], Any], left: Any, right: Any) -> bool:
    try:
        return bool(compare(left, right))
    except TypeError:  # sides that cannot be ordered
        return False


def _contains(container: Any, item: Any) -> bool:
    if not isinstance(container, _CONTAINERS):
        return False
    try:
        return item in container
    except TypeError:  # an unhashable item and a set, a non-str in a str
        return False
