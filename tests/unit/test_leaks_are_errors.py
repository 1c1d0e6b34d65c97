"""The suite treats a leaked resource as an error, on every Python: a connection dropped
without being closed raises ``ResourceWarning`` as an exception (``filterwarnings = error``
in pyproject.toml), and pytest reports an exception raised where nobody can catch it (a
``__del__`` run by the garbage collector) as a failure of the test that was running."""

from __future__ import annotations

import gc
import socket
import sqlite3
import sys
import warnings
from typing import Any


def _dropped(make: Any) -> list[Any]:
    """What reaches ``sys.unraisablehook`` when the object ``make()`` returns is dropped."""
    caught: list[Any] = []
    previous = sys.unraisablehook
    sys.unraisablehook = caught.append
    try:
        thing = make()
        del thing
        gc.collect()
    finally:
        sys.unraisablehook = previous
    return caught


def test_resource_warnings_are_errors_here() -> None:
    assert any(
        action == "error" and issubclass(ResourceWarning, category)
        for action, _message, category, _module, _line in warnings.filters[:5]
    ), warnings.filters[:5]


def test_a_dropped_socket_raises_resource_warning() -> None:
    caught = _dropped(socket.socket)
    assert caught, "dropping an open socket raised nothing"
    assert isinstance(caught[0].exc_value, ResourceWarning)


def test_a_dropped_sqlite_connection_raises_where_python_warns() -> None:
    caught = _dropped(lambda: sqlite3.connect(":memory:"))
    if sys.version_info >= (3, 13):  # sqlite3 warns about unclosed connections from 3.13 on
        assert caught and isinstance(caught[0].exc_value, ResourceWarning)
    else:
        assert not caught
