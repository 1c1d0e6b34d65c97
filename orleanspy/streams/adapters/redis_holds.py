"""Outside readers of ``RedisQueueAdapter`` (a Spark query, a backfill): their holds on
retention, the newest sequence of a queue, and enqueues written at most once.

Keys (next to the queue's stream ``P:queue:{queue}`` and kept set ``P:kept:{queue}``):

* ``P:hold:{queue}``: a hash, one field per reader: ``"seq expires"``, the oldest sequence
  the reader still needs and when its hold lapses (by the adapter's clock). While a hold is
  live, the acknowledgement script (``redis_kept.ACK``) keeps what it deletes (also without
  a retention) and stops trimming before ``seq``: the reader counts as a subscriber.
* ``P:marker:{marker}``: written by ``enqueue_once`` in the same script as its entries, so a
  retried write finds it and appends nothing; it expires after ``remember`` seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from orleanspy._util.redis import RedisClient

__all__ = ["ENQUEUE_ONCE", "HOLD", "enqueue_once", "hold", "newest_sequence", "release"]

#: how times are written (seconds since the epoch, to the microsecond), as ``redis_kept``
_TIME: Final = ".6f"

# KEYS: the queue's hold hash; ARGV: reader, seq, now, expires -> the previous hold's
# expiry if it had lapsed, else '' (a hold never moves back)
HOLD: Final = """
local old = redis.call('HGET', KEYS[1], ARGV[1])
local seq, lapsed = tonumber(ARGV[2]), ''
if old then
  local sp = string.find(old, ' ', 1, true)
  seq = math.max(seq, tonumber(string.sub(old, 1, sp - 1)))
  if tonumber(string.sub(old, sp + 1)) < tonumber(ARGV[3]) then
    lapsed = string.sub(old, sp + 1)
  end
end
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d %s', seq, ARGV[4]))
return lapsed
"""

# KEYS: marker, then (stream, counter) per queue; ARGV: write time, seconds to remember
# the marker, then quadruples (queue's position among the KEYS pairs, namespace, packed
# key, packed events) -> 1 if written, 0 if the marker was there
ENQUEUE_ONCE: Final = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) == false then return 0 end
for i = 3, #ARGV, 4 do
  local q = tonumber(ARGV[i]) * 2 + 2
  local n = redis.call('INCR', KEYS[q + 1])
  redis.call('XADD', KEYS[q], '0-' .. n, 's', ARGV[i + 1], 'k', ARGV[i + 2],
             'e', ARGV[i + 3], 't', ARGV[1])
end
return 1
"""


async def newest_sequence(client: RedisClient, queue: str) -> int:
    """The sequence of the newest entry ``queue`` ever had (its counter; 0: none)."""
    raw = await client.run(client.redis.get(client.key("queue-seq", queue)))
    return 0 if raw is None else int(raw)


async def release(client: RedisClient, queues: Sequence[str], reader: str) -> None:
    """Drop ``reader``'s hold on each of ``queues``."""
    pipe: Any = client.redis.pipeline(transaction=False)
    for queue in queues:
        pipe.hdel(client.key("hold", queue), reader)
    await client.execute(pipe)


async def hold(client: RedisClient, reader: str, holds: dict[str, int], now: float,
               expires: float) -> dict[str, float]:
    """Set ``reader``'s hold on each queue (queue -> sequence) until ``expires``; the queues
    whose previous hold had lapsed by ``now``, with when it lapsed."""
    script = client.redis.register_script(HOLD)
    lapsed: dict[str, float] = {}
    for queue, seq in holds.items():
        at = await client.run(script(keys=[client.key("hold", queue)],
                                     args=[reader, seq, format(now, _TIME),
                                           format(expires, _TIME)]))
        if at:
            lapsed[queue] = float(at)
    return lapsed


async def enqueue_once(client: RedisClient, marker: str,
                       entries: Sequence[tuple[str, str, bytes, bytes]], now: float,
                       remember: float) -> bool:
    """Append the entries (queue, namespace, packed key, packed events) and write ``marker``
    in one script, unless the marker is there (then nothing: False)."""
    keys, args = [client.key("marker", marker)], []
    where: dict[str, int] = {}
    for queue, namespace, key, events in entries:
        if queue not in where:
            where[queue] = len(where)
            keys += [client.key("queue", queue), client.key("queue-seq", queue)]
        args += [where[queue], namespace, key, events]
    script = client.redis.register_script(ENQUEUE_ONCE)
    done = await client.run(script(keys=keys, args=[format(now, _TIME),
                                                    max(1, int(remember)), *args]))
    return bool(done)
