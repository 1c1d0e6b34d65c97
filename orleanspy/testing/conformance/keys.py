"""The grain keys the storage and reminder suites use: keys that must name distinct records,
and the exact shape of a key for round-trip checks. Both suites store records by grain id,
so both check the same keys.
"""

from __future__ import annotations

import uuid
from typing import Any

from orleanspy.ids import GrainKey

__all__ = ["DISTINCT_KEYS", "key_shape"]

#: Grain keys that must all name different records (``1`` is not ``"1"``).
DISTINCT_KEYS: tuple[GrainKey, ...] = (
    1,
    "1",
    0,
    -1,
    2**63 - 1,
    "",
    "i:1",
    "s:1",
    "a,1",
    "(a,1)",
    "a)",
    "a\\",
    "ключ ✓",
    ("a", 1),
    ("a", "1"),
    (("a", 1),),
    ("a", (1,)),
    (),
    uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "12345678-1234-5678-1234-567812345678",
)


def key_shape(key: Any) -> Any:
    """A key together with the type of each of its parts, for exact round-trip checks."""
    if isinstance(key, (tuple, list)):
        return (type(key), tuple(key_shape(k) for k in key))
    return (type(key), key)
