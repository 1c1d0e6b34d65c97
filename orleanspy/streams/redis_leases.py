"""RedisQueueLeaseStore: stream-queue leases of a cluster on a Redis server.

The leases are the hash ``P:leases:C`` (``P`` the URL's prefix, ``C`` the cluster id):
queue -> ``"expiry owner"``. Taking, renewing and releasing are Lua scripts, so a
check-then-take is atomic across every silo of every host. Expiry times are wall-clock seconds
from the caller's clock, as with the SQLite store.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any, final

from orleanspy._util.redis import RedisClient
from orleanspy.streams.leases import Lease, QueueLeaseStore

__all__ = ["LeaseFence", "RedisQueueLeaseStore"]


@dataclass(frozen=True, slots=True)
class LeaseFence:
    """``owner``'s leases in the hash ``key`` on the Redis server ``server_url``: a Redis queue
    adapter on the same server deletes acknowledged entries only while the queue's lease
    names ``owner`` (the silo's address with its generation: one per incarnation)."""

    server_url: str
    key: str
    owner: str

# KEYS[1] leases; ARGV: queue, owner, now, expiry, dead owners...
_ACQUIRE = """
local held = redis.call('HGET', KEYS[1], ARGV[1])
if held then
  local sp = string.find(held, ' ', 1, true)
  local expiry = tonumber(string.sub(held, 1, sp - 1))
  local owner = string.sub(held, sp + 1)
  if owner ~= ARGV[2] and expiry >= tonumber(ARGV[3]) then
    local dead = false
    for i = 5, #ARGV do if ARGV[i] == owner then dead = true end end
    if not dead then return 0 end
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[4] .. ' ' .. ARGV[2])
return 1
"""
# KEYS[1] leases; ARGV: owner, expiry, queues... -> the queues renewed
_RENEW = """
local kept = {}
for i = 3, #ARGV do
  local held = redis.call('HGET', KEYS[1], ARGV[i])
  if held then
    local sp = string.find(held, ' ', 1, true)
    if string.sub(held, sp + 1) == ARGV[1] then
      redis.call('HSET', KEYS[1], ARGV[i], ARGV[2] .. ' ' .. ARGV[1])
      table.insert(kept, ARGV[i])
    end
  end
end
return kept
"""
# KEYS[1] leases; ARGV: owner, queues...
_RELEASE = """
for i = 2, #ARGV do
  local held = redis.call('HGET', KEYS[1], ARGV[i])
  if held then
    local sp = string.find(held, ' ', 1, true)
    if string.sub(held, sp + 1) == ARGV[1] then redis.call('HDEL', KEYS[1], ARGV[i]) end
  end
end
return 1
"""


@final
class RedisQueueLeaseStore(QueueLeaseStore):
    """Leases of cluster ``cluster_id`` on the Redis server of ``url``."""

    def __init__(self, url: str, cluster_id: str = "dev", *,
                 clock: Callable[[], float] = time.time) -> None:
        self.client = RedisClient(url)
        self._key = self.client.key("leases", cluster_id)
        self._clock = clock
        self._scripts: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"RedisQueueLeaseStore({self.client!r})"

    async def _run(self, source: str, args: list[Any]) -> Any:
        script = self._scripts.get(source)
        if script is None:
            script = self._scripts[source] = self.client.redis.register_script(source)
        return await self.client.run(script(keys=[self._key], args=args))

    async def read_all(self) -> dict[str, Lease]:
        raw = await self.client.run(self.client.redis.hgetall(self._key))
        out = {}
        for queue, value in raw.items():
            expiry, _, owner = value.decode().partition(" ")
            out[queue.decode()] = Lease(queue.decode(), owner, float(expiry))
        return out

    async def acquire(
        self, queue: str, owner: str, duration: float, dead: Collection[str] = ()
    ) -> bool:
        now = self._clock()
        return bool(await self._run(_ACQUIRE, [queue, owner, repr(now),
                                               repr(now + float(duration)), *dead]))

    async def renew(self, owner: str, queues: Iterable[str], duration: float) -> set[str]:
        wanted = list(queues)
        if not wanted:
            return set()
        kept = await self._run(_RENEW, [owner, repr(self._clock() + float(duration)), *wanted])
        return {q.decode() for q in kept}

    async def release(self, owner: str, queues: Iterable[str]) -> None:
        wanted = list(queues)
        if wanted:
            await self._run(_RELEASE, [owner, *wanted])

    def fence(self, owner: str) -> LeaseFence:
        return LeaseFence(self.client.server_url, self._key, owner)

    async def close(self) -> None:
        await self.client.close()
