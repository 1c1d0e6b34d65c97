"""The decode bound: a frame from a peer decodes to at most ``DECODE_RATIO`` times its size,
with a peak while decoding within ``PEAK_RATIO`` times (measured with tracemalloc), or is
refused with ``ProtocolError`` naming the bound."""

from __future__ import annotations

import gc
import struct
import sys
import tracemalloc
from collections.abc import Callable
from typing import Any

import msgpack
import pytest

from orleanspy.errors import ProtocolError
from orleanspy.messaging.codec import (
    DECODE_RATIO,
    EXT_DECIMAL,
    EXT_EXCEPTION,
    EXT_FROZENSET,
    EXT_GRAIN_ID,
    EXT_SET,
    EXT_TUPLE,
    MAX_BYTE_COST,
    PEAK_RATIO,
    UNCOUNTED_FRAME,
    Codec,
    unpack_plain_bounded,
)
from orleanspy.messaging.frames import decode_or_reject

N = 1 << 16  # bytes per shape: large enough to be counted, small enough for tracemalloc


def array(item: bytes, count: int) -> bytes:
    return b"\xdd" + struct.pack(">I", count) + item * count


def array_of(items: list[bytes]) -> bytes:
    return b"\xdd" + struct.pack(">I", len(items)) + b"".join(items)


def ext(code: int, data: bytes) -> bytes:
    return msgpack.packb(msgpack.ExtType(code, data))


def names(count: int, width: int) -> list[bytes]:
    """``count`` distinct ASCII strings of ``width`` letters."""
    out = []
    for i in range(count):
        letters = bytes(65 + (i // 58**k) % 58 for k in range(width))
        out.append(bytes((0xA0 | width,)) + letters)
    return out


#: The worst shapes found: many small containers, strings, numbers and ext values.
WORST: dict[str, bytes] = {
    "empty arrays": array(b"\x90", N),
    "empty maps": array(b"\x80", N),
    "nested empties": array(b"\x91\x90", N // 2),
    "one-entry maps": array(b"\x81\x00\x00", N // 3),
    "one-item arrays": array(b"\x91\x00", N // 2),
    "two-letter strings": array(b"\xa2ab", N // 3),
    "distinct three-letter strings": array_of(names(N // 4, 3)),
    "map of distinct string keys": b"\xdf" + struct.pack(">I", N // 5)
    + b"".join(name + b"\x00" for name in names(N // 5, 3)),
    "uint16s": array_of([b"\xcd" + (300 + i).to_bytes(2, "big") for i in range(N // 3)]),
    "negative int8s": array(b"\xd0\x80", N // 2),
    "float32s": array(b"\xca\x3f\x80\x00\x01", N // 5),
    "two-byte bins": array(b"\xc4\x02ab", N // 4),
    "unknown ext values": array(ext(99, b"a"), N // 3),
    "empty sets": array(ext(EXT_SET, b"\x90"), N // 3),
    "empty frozensets": array(ext(EXT_FROZENSET, b"\x90"), N // 3),
    "decimals": array(ext(EXT_DECIMAL, b"0"), N // 3),
    "empty tuples": array(ext(EXT_TUPLE, b"\x90"), N // 3),
    "remote exceptions": array(ext(EXT_EXCEPTION, b"\x93\xa0\xc0\xa0"), N // 6),
    "grain ids": array(ext(EXT_GRAIN_ID, b"\x92\xa1a\x00"), N // 6),
    "nested headers declaring the frame's length": (
        (b"\xdd" + struct.pack(">I", N - 1)) * (N // 5))[:N],
    "an ext value of nested headers": ext(
        EXT_TUPLE, ((b"\xdd" + struct.pack(">I", N - 10)) * (N // 5))[: N - 10]),
}

#: Shapes of real data: each decodes.
FINE: dict[str, Any] = {
    "pairs of small ints": [[i % 100, 2] for i in range(N // 3)],
    "tuples": [(i % 100, 2) for i in range(N // 6)],
    "records": [{"x": i, "y": 2.5} for i in range(N // 14)],
    "small records": [{"id": i % 100, "ok": True} for i in range(N // 9)],
    "a map of distinct keys": {f"key{i}": i for i in range(N // 10)},
    "strings": [f"item-{i}" for i in range(N // 10)],
    "ints": list(range(N // 3)),
    "bytes": b"x" * N,
}


def peak_of(decode: Callable[[], Any]) -> tuple[int, int, Any]:
    """Peak traced bytes while ``decode`` runs, the bytes its result holds, and the result
    (or the error it raised)."""
    gc.collect()
    tracemalloc.start()
    try:
        try:
            result: Any = decode()
        except Exception as exc:
            result = exc
        current, peak = tracemalloc.get_traced_memory()
        return peak, current, result
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("shape", list(WORST))
def test_the_worst_shapes_decode_within_the_ratio_or_are_refused(shape: str) -> None:
    data = WORST[shape]
    codec = Codec()
    # msgpack interns map keys: when the interpreter's table of interned strings grows, it
    # reallocates the whole table (its size is the process's, not the frame's); the budget
    # charges each key's slot, and the keys interned here keep the table from growing in
    # the middle of the measurement.
    interned = [sys.intern(k[1:].decode()) for k in names(N // 5, 3)]
    peak, held, result = peak_of(lambda: codec.unpack_frame(data))
    del interned
    assert peak <= PEAK_RATIO * len(data), f"{shape}: peak {peak / len(data):.1f}x"
    assert held <= DECODE_RATIO * len(data), f"{shape}: {held / len(data):.1f}x"
    if isinstance(result, ProtocolError):
        assert f"decodes to more than {DECODE_RATIO} times its size" in str(result)
    assert gc.isenabled()
    # before the handshake (plain msgpack, ext values as None) the same bound holds
    peak, held, _ = peak_of(lambda: unpack_plain_bounded(data))
    assert peak <= PEAK_RATIO * len(data), f"{shape} (plain): {peak / len(data):.1f}x"


def test_the_shapes_that_cost_most_are_refused_and_real_data_decodes() -> None:
    codec = Codec()
    for shape in ("empty arrays", "empty maps", "nested empties", "one-entry maps",
                  "empty sets", "decimals", "unknown ext values", "map of distinct string keys"):
        with pytest.raises(ProtocolError, match="decodes to more than 32 times its size"):
            codec.unpack_frame(WORST[shape])
    for shape, value in FINE.items():
        data = codec.packb(value)
        assert len(data) > UNCOUNTED_FRAME
        assert codec.unpack_frame(data) == value, shape


def test_a_refused_frame_closes_the_connection_with_the_reason() -> None:
    with pytest.raises(ProtocolError, match="decodes to more than 32 times"):
        decode_or_reject(Codec(), WORST["empty arrays"], True, lambda payload, exc: True)
    with pytest.raises(ProtocolError, match="decodes to more than 32 times"):
        decode_or_reject(Codec(), WORST["empty maps"], False, lambda payload, exc: True)


SHORT: dict[str, bytes] = {
    "empty arrays": msgpack.packb([[]] * (UNCOUNTED_FRAME - 3)),
    "nested maps of one entry": b"\x81\x00" * (UNCOUNTED_FRAME // 2 - 1) + b"\x00",
    "empty sets": array(ext(EXT_SET, b"\x90"), (UNCOUNTED_FRAME - 5) // 3),
}


@pytest.mark.parametrize("shape", list(SHORT))
def test_a_short_frame_decodes_uncounted_within_an_absolute_bound(shape: str) -> None:
    data = SHORT[shape]
    assert len(data) <= UNCOUNTED_FRAME
    codec = Codec()
    codec.unpack_frame(b"\x90")
    peak, _, value = peak_of(lambda: codec.unpack_frame(data))
    assert not isinstance(value, Exception)
    assert peak <= UNCOUNTED_FRAME * MAX_BYTE_COST, f"{shape}: {peak}"


def test_nested_headers_of_a_short_frame_reserve_a_bounded_amount() -> None:
    frame = ((b"\xdc" + struct.pack(">H", UNCOUNTED_FRAME - 3)) * 100)[:UNCOUNTED_FRAME]
    codec = Codec()
    peak, _, value = peak_of(lambda: codec.unpack_frame(frame))
    assert isinstance(value, Exception)
    assert peak <= 85 * 2048 + 16384
