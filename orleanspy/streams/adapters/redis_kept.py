"""Retention and time travel for ``RedisQueueAdapter``: the acknowledgement script, what it
keeps and trims, and ``read_range`` over the kept and the unacknowledged entries.

Keys (next to the queue's stream ``P:queue:{queue}``):

* ``P:kept:{queue}``: a sorted set of the acknowledged entries still retained, scored by
  sequence; each member is a msgpack array ``[seq, namespace, key, events, t, acked]``
  (``acked``: when the acknowledgement ran, by the adapter's clock). A sorted set, not a
  stream: acknowledgements may come out of sequence order, which ``XADD`` refuses.
* ``P:trimmed`` (a hash, one field per queue): ``"seq t"``, the newest sequence and write time
  of any entry that is gone (acknowledged without retention, or trimmed). Everything of the
  queue after that sequence is still kept or queued: a replay from a later point has no gap,
  one from that point or earlier is refused (``ReplayUnavailableError``).

The acknowledgement is one Lua script (checking the queue's lease first when fenced): it
moves (retention) or deletes the entries, moves the mark, and trims a prefix of the kept set
(at most 512 members per call: later acknowledgements go on), so the mark stays exact.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import msgpack

from orleanspy.errors import ReplayUnavailableError
from orleanspy.streams.tokens import SequenceToken

if TYPE_CHECKING:
    from orleanspy._util.redis import RedisClient

__all__ = ["ACK", "KeptEntry", "read_range", "read_union"]

# KEYS: stream, kept, trimmed, leases, holds; ARGV: queue, owner ('' = unfenced), now,
# seconds, count, retain ('1'/'0'), top id (the newest acknowledged), ids... -> 1, or -1 if
# fenced. A live reader's hold (``redis_holds``) keeps entries as a retention does and stops
# trimming at the oldest sequence it needs.
ACK: Final = """
if ARGV[2] ~= '' then
  local lease = redis.call('HGET', KEYS[4], ARGV[1])
  if not lease then return -1 end
  local sp = string.find(lease, ' ', 1, true)
  if string.sub(lease, sp + 1) ~= ARGV[2] then return -1 end
end
local held = nil
local holds = redis.call('HGETALL', KEYS[5])
for j = 1, #holds, 2 do
  local v = holds[j + 1]
  local sp = string.find(v, ' ', 1, true)
  if tonumber(string.sub(v, sp + 1)) >= tonumber(ARGV[3]) then
    local s = tonumber(string.sub(v, 1, sp - 1))
    if held == nil or s < held then held = s end
  end
end
local function mark(seq, t)
  local old = redis.call('HGET', KEYS[3], ARGV[1])
  if old then
    local sp = string.find(old, ' ', 1, true)
    seq = math.max(seq, tonumber(string.sub(old, 1, sp - 1)))
    t = math.max(t, tonumber(string.sub(old, sp + 1)))
  end
  redis.call('HSET', KEYS[3], ARGV[1], string.format('%d %.6f', seq, t))
end
local function field(f, name)
  for j = 1, #f, 2 do if f[j] == name then return f[j + 1] end end
  return nil
end
if ARGV[6] ~= '1' and held == nil then
  local e = redis.call('XRANGE', KEYS[1], ARGV[7], ARGV[7])
  if #e > 0 then
    mark(tonumber(string.sub(ARGV[7], 3)), tonumber(field(e[1][2], 't') or '0') or 0)
  end
  redis.call('XDEL', KEYS[1], unpack(ARGV, 8))
  return 1
end
for i = 8, #ARGV do
  local e = redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i])
  if #e > 0 then
    local f = e[1][2]
    local seq = tonumber(string.sub(ARGV[i], 3))
    redis.call('ZADD', KEYS[2], seq, cmsgpack.pack({seq, field(f, 's'), field(f, 'k'),
               field(f, 'e'), field(f, 't') or '0', ARGV[3]}))
  end
end
redis.call('XDEL', KEYS[1], unpack(ARGV, 8))
local seconds, count = tonumber(ARGV[4]), tonumber(ARGV[5])
local cutoff = tonumber(ARGV[3]) - seconds
local limit = redis.call('ZCARD', KEYS[2])
if count > 0 then limit = limit - count end
if limit <= 0 then return 1 end
local last, lastt = nil, 0
for _, m in ipairs(redis.call('ZRANGE', KEYS[2], 0, math.min(limit, 512) - 1)) do
  local e = cmsgpack.unpack(m)
  if seconds > 0 and tonumber(e[6]) >= cutoff then break end
  if held ~= nil and e[1] >= held then break end
  last, lastt = e[1], tonumber(e[5]) or 0
end
if last then
  mark(last, lastt)
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', last)
end
return 1
"""
_PAGE: Final = 256
#: how write times are kept (seconds since the epoch, to the microsecond)
TIME_FORMAT: Final = ".6f"

#: (seq, namespace, packed key, packed events, write time) of one kept or queued entry
KeptEntry = tuple[int, bytes, bytes, bytes, float]


def _time(raw: Any) -> float:
    try:
        at = float(raw)
    except (TypeError, ValueError):
        return 0.0
    return at if 0.0 < at < 1e11 else 0.0


def _from_stream(entry_id: bytes, fields: dict[bytes, bytes]) -> KeptEntry:
    return (int(entry_id.split(b"-", 1)[1]), fields[b"s"], fields[b"k"], fields[b"e"],
            _time(fields.get(b"t")))


def _from_kept(member: bytes) -> KeptEntry:
    seq, ns, key, events, t, _acked = msgpack.unpackb(member, raw=True)
    return int(seq), ns, key, events, _time(t)


async def read_union(client: RedisClient, queue: str, seq: int, max_count: int,
                     stream: tuple[bytes, bytes] | None) -> list[KeptEntry]:
    """Entries of ``queue`` (of ``stream`` = (namespace, packed key) only, if given) from
    ``seq`` on, queued and kept alike, in sequence order. The queue is read first: an entry
    acknowledged between the two reads shows up twice (dropped), never not at all."""
    if max_count <= 0:
        return []
    redis = client.redis
    queued: dict[int, KeptEntry] = {}
    kept: dict[int, KeptEntry] = {}

    def take(found: dict[int, KeptEntry], entry: KeptEntry) -> bool:
        if stream is None or (entry[1], entry[2]) == stream:
            found[entry[0]] = entry
        return len(found) >= max_count

    start = f"0-{max(seq, 0)}"
    while True:
        page = await client.run(redis.xrange(client.key("queue", queue), min=start, max="+",
                                             count=_PAGE))
        if any(take(queued, _from_stream(i, f)) for i, f in page) or len(page) < _PAGE:
            break
        start = f"(0-{int(page[-1][0].split(b'-', 1)[1])}"
    low = max(seq, 0)
    while True:
        page = await client.run(redis.zrangebyscore(client.key("kept", queue), low, "+inf",
                                                    start=0, num=_PAGE))
        entries = [_from_kept(m) for m in page]
        if any(take(kept, e) for e in entries) or len(page) < _PAGE:
            break
        low = entries[-1][0] + 1
    kept.update(queued)
    return [kept[s] for s in sorted(kept)[:max_count]]


async def _mark(client: RedisClient, queue: str) -> tuple[int, float] | None:
    raw = await client.run(client.redis.hget(client.key("trimmed"), queue))
    if raw is None:
        return None
    seq, at = raw.split(b" ", 1)
    return int(seq), float(at)


async def _first_at(client: RedisClient, queue: str, at: float) -> int | None:
    """The sequence of the oldest entry of ``queue`` written at or after ``at`` (write
    times grow with sequences: each source is scanned from its oldest entry)."""
    redis = client.redis
    best: list[int] = []
    start = "-"
    while True:
        page = await client.run(redis.xrange(client.key("queue", queue), min=start, max="+",
                                             count=_PAGE))
        hit = next((e[0] for e in map(_from_stream, *zip(*page, strict=True)) if e[4] >= at),
                   None) if page else None
        if hit is not None:
            best.append(hit)
            break
        if len(page) < _PAGE:
            break
        start = f"(0-{int(page[-1][0].split(b'-', 1)[1])}"
    index = 0
    while True:
        members = await client.run(redis.zrange(client.key("kept", queue), index,
                                                index + _PAGE - 1))
        hit = next((e[0] for e in map(_from_kept, members) if e[4] >= at), None)
        if hit is not None:
            best.append(hit)
            break
        if len(members) < _PAGE:
            break
        index += _PAGE
    return min(best) if best else None



async def read_range(client: RedisClient, queue: str, start: SequenceToken | float,
                     max_count: int, stream: tuple[bytes, bytes] | None) -> list[KeptEntry]:
    """``QueueAdapter.read_range``: refuse a start at or before the queue's mark (checked
    after the read, so a trim meanwhile is seen), else the entries from it on."""
    if max_count < 0:
        raise ValueError(f"max_count must be >= 0, got {max_count}")
    if isinstance(start, SequenceToken):
        seq: int | None = start.sequence
    else:  # write times are kept to the microsecond (``TIME_FORMAT``): compare at that
        start = float(format(float(start), TIME_FORMAT))
        seq = await _first_at(client, queue, start)
    entries = [] if seq is None else await read_union(client, queue, seq, max_count, stream)
    mark = await _mark(client, queue)
    if mark is not None and (start.sequence <= mark[0] if isinstance(start, SequenceToken)
                             else float(start) <= mark[1]):
        oldest = await read_union(client, queue, mark[0] + 1, 1, None)
        token = SequenceToken(oldest[0][0] if oldest else mark[0] + 1)
        at = oldest[0][4] if oldest else mark[1]
        raise ReplayUnavailableError.beyond_retention(queue, start, token, at)
    return entries
