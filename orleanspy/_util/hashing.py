"""Stable hashes (identical in every process, unlike ``hash(str)``)."""

from __future__ import annotations

import hashlib

__all__ = ["stable_hash32", "stable_hash64"]


def stable_hash64(data: str | bytes) -> int:
    raw = data.encode() if isinstance(data, str) else data
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little")


def stable_hash32(data: str | bytes) -> int:
    return stable_hash64(data) & 0xFFFFFFFF
