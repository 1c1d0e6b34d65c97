"""RedisGrainStorage: grain state in Redis, one hash per record, etags checked atomically.

Each record is the hash ``P:state:{canonical grain id}:{state name}`` with fields ``data``
and ``etag``. A write or a clear runs as one Lua script that compares the stored etag with
the caller's and changes the record only if they match, so two silos racing on one grain
cannot both win (``InconsistentStateError`` for the loser, as with every provider).
"""

from __future__ import annotations

import uuid
from typing import Any

from orleanspy._util.redis import RedisClient
from orleanspy.errors import InconsistentStateError
from orleanspy.ids import GrainId
from orleanspy.storage.base import GrainStorage, StoredState

__all__ = ["RedisGrainStorage"]

# KEYS[1] record; ARGV: expected etag ("" = none), data, new etag -> {ok, stored etag}
_WRITE = """
local cur = redis.call('HGET', KEYS[1], 'etag')
if cur == false then cur = '' end
if cur ~= ARGV[1] then return {0, cur} end
redis.call('HSET', KEYS[1], 'data', ARGV[2], 'etag', ARGV[3])
return {1, ARGV[3]}
"""
# KEYS[1] record; ARGV: expected etag ("" = none) -> {ok, stored etag}
_CLEAR = """
local cur = redis.call('HGET', KEYS[1], 'etag')
if cur == false then cur = '' end
if cur ~= ARGV[1] then return {0, cur} end
redis.call('DEL', KEYS[1])
return {1, ''}
"""


class RedisGrainStorage(GrainStorage):
    """Grain state on the Redis server of ``url`` (``redis://host:port/db?prefix=P``)."""

    def __init__(self, url: str) -> None:
        self.client = RedisClient(url)
        self._write: Any = None
        self._clear: Any = None

    def __repr__(self) -> str:
        return f"RedisGrainStorage({self.client!r})"

    async def open(self) -> None:
        await self.client.open()

    async def close(self) -> None:
        await self.client.close()

    def _key(self, grain_id: GrainId, state_name: str) -> str:
        return self.client.key("state", grain_id.canonical(), state_name)

    async def read(self, grain_id: GrainId, state_name: str) -> StoredState | None:
        data, etag = await self.client.run(self.client.redis.hmget(
            self._key(grain_id, state_name), ["data", "etag"]))
        if etag is None:
            return None
        return StoredState(bytes(data or b""), etag.decode())

    async def write(self, grain_id: GrainId, state_name: str, data: bytes,
                    etag: str | None) -> str:
        new_etag = uuid.uuid4().hex
        if self._write is None:
            self._write = self.client.redis.register_script(_WRITE)
        ok, stored = await self.client.run(self._write(
            keys=[self._key(grain_id, state_name)], args=[etag or "", bytes(data), new_etag]))
        if not ok:
            self._conflict("write", grain_id, state_name, stored, etag)
        return new_etag

    async def clear(self, grain_id: GrainId, state_name: str, etag: str | None) -> None:
        if self._clear is None:
            self._clear = self.client.redis.register_script(_CLEAR)
        ok, stored = await self.client.run(self._clear(
            keys=[self._key(grain_id, state_name)], args=[etag or ""]))
        if not ok:
            self._conflict("clear", grain_id, state_name, stored, etag)

    @staticmethod
    def _conflict(action: str, grain_id: GrainId, state_name: str, stored: bytes,
                  etag: str | None) -> None:
        stored_etag = stored.decode() or None
        raise InconsistentStateError(
            f"cannot {action} state {state_name!r} of {grain_id}: stored etag is "
            f"{stored_etag!r}, the caller's etag is {etag!r}",
            stored_etag,
            etag,
        )
