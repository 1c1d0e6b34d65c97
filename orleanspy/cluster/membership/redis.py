"""RedisMembershipTable: the membership table of a cluster on a Redis server.

Keys (``P`` the URL's prefix, ``C`` the cluster id): ``P:membership:C:version`` (hash:
``version``, ``etag``), ``...:rows`` (silo -> the row's 32-character etag followed by the
encoded entry), ``...:alive`` (silo -> I-am-alive time), ``...:status`` (silo -> status, so
the cleanup script can find the dead) and ``...:key`` (the cluster key). Every write is one Lua
script that checks the table version (and the row etag) and changes rows and version
together; an I-am-alive touches only ``alive``. A read is one script too, so rows and version
come from one snapshot (it also creates version 0 of a new table).
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from typing import Any, final

from orleanspy._util.redis import RedisClient
from orleanspy.cluster.membership.entry import (
    MembershipEntry,
    MembershipTableData,
    TableVersion,
    decode_entry,
    encode_entry,
)
from orleanspy.cluster.membership.table import MembershipTable
from orleanspy.errors import MembershipError
from orleanspy.ids import SiloAddress

__all__ = ["RedisMembershipTable"]

_ETAG = 32

# KEYS: version, rows, alive; ARGV: etag for a new table -> {version, etag, rows..., alive...}
_READ = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'version', 0, 'etag', ARGV[1])
end
local v = redis.call('HMGET', KEYS[1], 'version', 'etag')
return {v[1], v[2], redis.call('HGETALL', KEYS[2]), redis.call('HGETALL', KEYS[3])}
"""
# KEYS: version, rows, alive, status; ARGV: version, version etag, silo, row, alive, status,
# new version etag, expected row etag ('' = insert: no row may exist)
_WRITE = """
local v = redis.call('HMGET', KEYS[1], 'version', 'etag')
if v[1] == false then v = {'0', ''} end
if v[1] ~= ARGV[1] or v[2] ~= ARGV[2] then return 0 end
local row = redis.call('HGET', KEYS[2], ARGV[3])
if ARGV[8] == '' then
  if row ~= false then return 0 end
elseif row == false or string.sub(row, 1, 32) ~= ARGV[8] then
  return 0
end
redis.call('HSET', KEYS[2], ARGV[3], ARGV[4])
redis.call('HSET', KEYS[3], ARGV[3], ARGV[5])
redis.call('HSET', KEYS[4], ARGV[3], ARGV[6])
redis.call('HSET', KEYS[1], 'version', tonumber(ARGV[1]) + 1, 'etag', ARGV[7])
return 1
"""
# KEYS: rows, alive; ARGV: silo, time
_ALIVE = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
"""
# KEYS: rows, alive, status; ARGV: before
_CLEANUP = """
local n = 0
local status = redis.call('HGETALL', KEYS[3])
for i = 1, #status, 2 do
  local silo = status[i]
  if status[i + 1] == 'dead' or status[i + 1] == 'stopped' then
    local alive = tonumber(redis.call('HGET', KEYS[2], silo) or '0')
    if alive < tonumber(ARGV[1]) then
      redis.call('HDEL', KEYS[1], silo)
      redis.call('HDEL', KEYS[2], silo)
      redis.call('HDEL', KEYS[3], silo)
      n = n + 1
    end
  end
end
return n
"""


def _silo_field(silo: SiloAddress) -> str:
    return f"{silo.host}:{silo.port}@{silo.generation}"


@final
class RedisMembershipTable(MembershipTable):
    """Rows of cluster ``cluster_id`` on the Redis server of ``url``."""

    def __init__(self, url: str, cluster_id: str) -> None:
        self.url = url
        self.cluster_id = cluster_id
        self.client = RedisClient(url)
        base = self.client.key("membership", cluster_id)
        self._version, self._rows = f"{base}:version", f"{base}:rows"
        self._alive, self._status, self._key = f"{base}:alive", f"{base}:status", f"{base}:key"
        self._scripts: dict[str, Any] = {}
        self._closed = False

    def __repr__(self) -> str:
        return f"RedisMembershipTable({self.client!r}, {self.cluster_id!r})"

    def _script(self, source: str) -> Any:
        script = self._scripts.get(source)
        if script is None:
            script = self._scripts[source] = self.client.redis.register_script(source)
        return script

    async def _run(self, source: str, keys: list[str], args: list[Any]) -> Any:
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")
        try:
            return await self.client.run(self._script(source)(keys=keys, args=args))
        except Exception as exc:
            raise MembershipError(
                f"membership table on Redis ({self.client!r}) failed: {exc!r}"
            ) from exc

    async def open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")
        try:
            await self.client.open()
        except Exception as exc:
            raise MembershipError(str(exc)) from exc

    async def close(self) -> None:
        self._closed = True
        await self.client.close()

    async def read_all(self) -> MembershipTableData:
        version, etag, rows, alive = await self._run(
            _READ, [self._version, self._rows, self._alive], [uuid.uuid4().hex])
        times = {alive[i]: float(alive[i + 1]) for i in range(0, len(alive), 2)}
        out = []
        for i in range(0, len(rows), 2):
            silo, raw = rows[i], rows[i + 1]
            entry = decode_entry(raw[_ETAG:])
            if silo in times:
                entry = dataclasses.replace(entry, i_am_alive_time=times[silo])
            out.append((entry, raw[:_ETAG].decode()))
        out.sort(key=lambda row: (row[0].silo.host, row[0].silo.port, row[0].silo.generation))
        return MembershipTableData(tuple(out), TableVersion(int(version), etag.decode()))

    async def read_row(self, silo: SiloAddress) -> MembershipTableData:
        data = await self.read_all()
        row = data.get(silo)
        return MembershipTableData(() if row is None else (row,), data.version)

    async def _write(self, entry: MembershipEntry, etag: str, table_version: TableVersion
                     ) -> bool:
        row = uuid.uuid4().hex.encode() + encode_entry(entry)
        ok = await self._run(_WRITE, [self._version, self._rows, self._alive, self._status], [
            str(table_version.version), table_version.etag, _silo_field(entry.silo), row,
            repr(float(entry.i_am_alive_time)), entry.status.value, uuid.uuid4().hex, etag,
        ])
        return bool(ok)

    async def insert_row(self, entry: MembershipEntry, table_version: TableVersion) -> bool:
        return await self._write(entry, "", table_version)

    async def update_row(
        self, entry: MembershipEntry, etag: str, table_version: TableVersion
    ) -> bool:
        if not etag:
            return False
        return await self._write(entry, etag, table_version)

    async def update_i_am_alive(self, silo: SiloAddress, time: float) -> bool:
        return bool(await self._run(_ALIVE, [self._rows, self._alive],
                                    [_silo_field(silo), repr(float(time))]))

    async def cleanup_defunct(self, before: float) -> int:
        return int(await self._run(_CLEANUP, [self._rows, self._alive, self._status],
                                   [repr(float(before))]))

    async def delete_table(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")
        try:
            pipe = self.client.redis.pipeline(transaction=True)  # execute() resets it
            pipe.delete(self._rows, self._alive, self._status)
            pipe.hset(self._version, mapping={"version": 0, "etag": uuid.uuid4().hex})
            await self.client.execute(pipe)
        except Exception as exc:
            raise MembershipError(f"membership table on Redis failed: {exc!r}") from exc

    async def cluster_ids(self) -> list[str]:
        base = self.client.key("membership", "")
        try:
            keys = [k async for k in self.client.redis.scan_iter(match=f"{base}*:version")]
        except Exception as exc:
            raise MembershipError(f"membership table on Redis failed: {exc!r}") from exc
        return sorted(k.decode()[len(base):-len(":version")] for k in keys)

    async def cluster_key(self) -> bytes:
        """A random key stored with the table by the first silo that asks (SET NX)."""
        redis = self.client.redis
        try:
            await self.client.run(redis.set(self._key, os.urandom(32), nx=True))
            key = await self.client.run(redis.get(self._key))
        except Exception as exc:
            raise MembershipError(f"membership table on Redis failed: {exc!r}") from exc
        return bytes(key)
