"""RedisReminderTable: durable reminder rows in Redis.

The rows of one grain are the hash ``P:reminders:{canonical grain id}`` (field: reminder
name, value: the row's 32-character etag followed by the msgpack-encoded row); the set
``P:reminders`` lists the grains that have rows. A removal under an etag is one Lua
script, so it never deletes a row that was replaced meanwhile.
"""

from __future__ import annotations

import uuid
from typing import Any

from orleanspy._util.redis import RedisClient
from orleanspy.ids import GrainId
from orleanspy.messaging.codec import Codec
from orleanspy.reminders.base import ReminderEntry, ReminderTable

__all__ = ["RedisReminderTable"]

_ETAG = 32  # characters of an etag (uuid4 hex), stored before each row

# KEYS: the grain's hash, the index set; ARGV: name, expected etag, grain canonical
_REMOVE = """
local row = redis.call('HGET', KEYS[1], ARGV[1])
if row == false then return 0 end
if ARGV[2] ~= '' and string.sub(row, 1, 32) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
if redis.call('HLEN', KEYS[1]) == 0 then redis.call('SREM', KEYS[2], ARGV[3]) end
return 1
"""


class RedisReminderTable(ReminderTable):
    """Reminder rows on the Redis server of ``url`` (``redis://host:port/db?prefix=P``)."""

    def __init__(self, url: str) -> None:
        self.client = RedisClient(url)
        self._codec = Codec()
        self._remove: Any = None

    def __repr__(self) -> str:
        return f"RedisReminderTable({self.client!r})"

    async def open(self) -> None:
        await self.client.open()

    async def close(self) -> None:
        await self.client.close()

    def _hash(self, canonical: str) -> str:
        return self.client.key("reminders", canonical)

    def _entry(self, raw: bytes) -> ReminderEntry:
        grain_type, key, name, start_at, period = self._codec.unpackb(raw[_ETAG:])
        return ReminderEntry(GrainId(grain_type, self._codec.unpackb(key)), name,
                             float(start_at), float(period), raw[:_ETAG].decode())

    async def read_all(self) -> list[ReminderEntry]:
        redis = self.client.redis
        grains = sorted(g.decode() for g in await self.client.run(
            redis.smembers(self.client.key("reminders"))))
        if not grains:
            return []
        pipe = redis.pipeline(transaction=False)  # execute() resets it
        for canonical in grains:
            pipe.hgetall(self._hash(canonical))
        rows = await self.client.execute(pipe)
        return [self._entry(row[name]) for row in rows for name in sorted(row)]

    async def read_rows(self, grain_id: GrainId) -> list[ReminderEntry]:
        row = await self.client.run(self.client.redis.hgetall(self._hash(grain_id.canonical())))
        return [self._entry(row[name]) for name in sorted(row)]

    async def read_row(self, grain_id: GrainId, name: str) -> ReminderEntry | None:
        raw = await self.client.run(self.client.redis.hget(self._hash(grain_id.canonical()), name))
        return None if raw is None else self._entry(raw)

    async def upsert(self, entry: ReminderEntry) -> str:
        grain_id = entry.grain_id
        etag = uuid.uuid4().hex
        raw = etag.encode() + self._codec.packb(
            [grain_id.type_name, self._codec.packb(grain_id.key), entry.name,
             float(entry.start_at), float(entry.period)])
        canonical = grain_id.canonical()
        pipe = self.client.redis.pipeline(transaction=True)  # execute() resets it
        pipe.hset(self._hash(canonical), entry.name, raw)
        pipe.sadd(self.client.key("reminders"), canonical)
        await self.client.execute(pipe)
        return etag

    async def remove(self, grain_id: GrainId, name: str, etag: str | None) -> bool:
        if self._remove is None:
            self._remove = self.client.redis.register_script(_REMOVE)
        canonical = grain_id.canonical()
        removed = await self.client.run(self._remove(
            keys=[self._hash(canonical), self.client.key("reminders")],
            args=[name, etag or "", canonical]))
        return bool(removed)
