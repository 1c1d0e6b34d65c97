"""BackendUrl: the one parser of back-end URLs (storage, reminders, membership, queues).

Accepted forms: ``memory``; ``sqlite:PATH`` and ``sqlite://PATH`` (a relative PATH resolves
against the data directory, an absolute one stands, ``sqlite:///abs/path`` included);
``redis://[user:password@]host[:port][/db]`` and ``rediss://…``;
``postgresql://[user[:password]@]host[:port]/database[?schema=S]`` (or ``postgres://…``);
``nats://host:port`` and ``tls://…`` (stream queues in NATS JetStream); plus any extra bare
words a caller allows (``generator`` for stream queues).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from orleanspy.errors import ConfigurationError

__all__ = ["BackendUrl", "anchor_sqlite", "parse_backend_url", "relative_sqlite", "sqlite_file"]

Scheme = Literal["memory", "sqlite", "redis", "postgres", "nats", "word"]


def sqlite_file(url: object) -> str | None:
    """The file a ``sqlite:`` or ``sqlite://`` URL names, as written; None for other URLs."""
    if not isinstance(url, str) or not url.startswith("sqlite:"):
        return None
    path = url.removeprefix("sqlite:")
    return path[2:] if path.startswith("//") else path


def relative_sqlite(url: object) -> str | None:
    """The file of a ``sqlite:`` URL if it is a relative path, else None."""
    path = sqlite_file(url)
    return path if path and not os.path.isabs(path) else None


def anchor_sqlite(url: str, folder: str) -> str:
    """``url`` with a relative SQLite path made absolute against ``folder`` (other URLs and
    absolute paths as they are)."""
    relative = relative_sqlite(url)
    if relative is None:
        return url
    return f"sqlite:{os.path.abspath(os.path.join(folder, relative))}"


@dataclass(frozen=True, slots=True)
class BackendUrl:
    """A parsed back-end URL.

    ``scheme`` is ``memory``, ``sqlite``, ``redis``, ``postgres``, ``nats`` or ``word`` (an
    allowed bare word, kept in ``text``); ``path`` is the SQLite file, resolved; ``text`` is
    the URL as given.
    """

    scheme: Scheme
    text: str
    path: str = ""

    def __str__(self) -> str:
        return self.text


def parse_backend_url(
    url: str,
    *,
    key: str,
    data_dir: str = ".",
    allow: frozenset[str] = frozenset({"memory", "sqlite", "redis", "postgres"}),
    words: frozenset[str] = frozenset(),
    example: str = "sqlite:orleanspy.db",
) -> BackendUrl:
    """Parse ``url`` given for setting ``key``.

    Args:
        url: the text, e.g. ``memory`` or ``sqlite:state.db``.
        key: the setting's name for the error (``SiloOptions.storage``, ``streams.x.adapter``).
        data_dir: folder a relative SQLite path resolves against.
        allow: the schemes this setting accepts.
        words: further bare words accepted (returned with scheme ``word``).
        example: a valid value quoted in errors.

    Raises:
        ConfigurationError: naming ``key``, the value and the accepted forms.
    """
    choices = sorted(
        [*(("memory",) if "memory" in allow else ()), *sorted(words)]
        + (["sqlite:PATH"] if "sqlite" in allow else [])
        + (["redis://HOST:PORT/DB"] if "redis" in allow else [])
        + (["postgresql://HOST:PORT/DB"] if "postgres" in allow else [])
        + (["nats://HOST:PORT"] if "nats" in allow else [])
    )

    def bad(why: str) -> ConfigurationError:
        return ConfigurationError(
            f"{key} = {url!r}: {why}; use {' | '.join(choices)} (e.g. {example})"
        )

    if not isinstance(url, str):
        raise bad("not a string")
    text = url.strip()
    if text == "memory" and "memory" in allow:
        return BackendUrl("memory", text)
    if text in words:
        return BackendUrl("word", text)
    if text.startswith("sqlite:") and "sqlite" in allow:
        path = sqlite_file(text) or ""
        if not path:
            raise bad("no file named")
        if not os.path.isabs(path):
            path = os.path.join(data_dir, path)
        return BackendUrl("sqlite", text, os.path.normpath(path))
    if text.startswith(("redis://", "rediss://", "unix://")) and "redis" in allow:
        rest = text.split("://", 1)[1]
        if not rest:
            raise bad("no host named")
        return BackendUrl("redis", text)
    if text.startswith(("nats://", "tls://")) and "nats" in allow:
        if not text.split("://", 1)[1]:
            raise bad("no host named")
        return BackendUrl("nats", text)
    if text.startswith(("postgresql://", "postgres://")) and "postgres" in allow:
        if not text.split("://", 1)[1]:
            raise bad("no host named")
        return BackendUrl("postgres", text)
    raise bad("unknown back end")
