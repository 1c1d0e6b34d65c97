"""A framed connection that pauses reading hands on no further frame, buffered or not,
until it resumes (the gateway's back-pressure)."""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from orleanspy.messaging.connection import FramedConnection


class Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.reading = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


class Pausing(FramedConnection):
    def __init__(self) -> None:
        super().__init__(1024, structlog.get_logger())
        self.frames: list[bytes] = []

    def frame_received(self, payload: bytes | bytearray) -> None:
        self.frames.append(bytes(payload))
        if payload == b"stop":
            self.pause_reading()


async def test_a_paused_connection_hands_on_no_frame_until_it_resumes() -> None:
    conn = Pausing()
    transport = Transport()
    conn.connection_made(transport)
    conn.ready = True
    data = b"".join(len(p).to_bytes(4, "big") + p for p in (b"a", b"stop", b"b", b"c"))
    conn.data_received(data[:-2])
    assert conn.frames == [b"a", b"stop"]
    assert not transport.reading and conn.reading_paused
    conn.resume_reading()  # the buffered frame goes on, then the socket is read again
    assert conn.frames == [b"a", b"stop", b"b"]
    assert transport.reading
    conn.data_received(data[-2:])
    assert conn.frames == [b"a", b"stop", b"b", b"c"]
