"""ClientObserverHub: the grain that queues a ClusterClient's observer calls.

Keyed by the client's id. Grains call a client's observers (``grains.observer``) with
one-way ``notify`` calls here; the client long-polls ``poll(wait, after)`` through any of its
gateways and runs each call on its object. Every queued call has a sequence number: a poll
names the last one its client ran (``after``), and the hub forgets those, so a poll whose
answer was lost with a gateway is answered again on the next one, through another gateway.

Bounds: at most ``MAX_QUEUED`` calls wait (beyond that the oldest are dropped and
counted, with a warning); while the client has not polled for ``AWAY_AFTER`` seconds new
calls are dropped (an observer is best effort, as in Orleans: grains that need every event
delivered use a stream). Only a connection that proved the id that is the hub's key may call
it (checked by the gateway).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Final

from orleanspy.grains.grain import Grain
from orleanspy.grains.interface import client_endpoint, grain_type, reentrant, runtime_grain
from orleanspy.grains.observer import OBSERVER_HUB_TYPE
from orleanspy.runtime.activation_state import ActivationState

__all__ = ["AWAY_AFTER", "MAX_POLL_WAIT", "MAX_QUEUED", "ClientObserverHub"]

#: calls that may wait for their client; the oldest beyond are dropped
MAX_QUEUED: Final = 10_000
#: calls one poll answers with at most
MAX_BATCH: Final = 1000
#: a client that has not polled for this long is away: its new calls are dropped
AWAY_AFTER: Final = 60.0
#: the longest a poll waits for a call
MAX_POLL_WAIT: Final = 20.0
_MAX_DELETED: Final = 256
_SLICE: Final = 0.5


@client_endpoint
@runtime_grain
@reentrant
@grain_type(OBSERVER_HUB_TYPE)
class ClientObserverHub(Grain):
    """One client's queue of observer calls."""

    async def on_activate(self) -> None:
        self._queue: deque[list[Any]] = deque()
        self._seq = 0
        self._waiter: asyncio.Future[None] | None = None
        self._seen = self._now()  # a fresh activation gives its client a full grace period
        self._wait = 0.0
        self._dropped = 0
        self._deleted: deque[str] = deque(maxlen=_MAX_DELETED)

    def _now(self) -> float:
        return float(self._orleanspy_activation.silo.clock.monotonic())

    async def notify(self, observer_id: str, method: str, args: list[Any],
                     kwargs: dict[str, Any] | None) -> None:
        """Queue one call of ``method`` on the client's observer ``observer_id``."""
        if self._now() - self._seen - self._wait > AWAY_AFTER or observer_id in self._deleted:
            return
        self._seq += 1
        self._queue.append([self._seq, observer_id, method, args, kwargs])
        if len(self._queue) > MAX_QUEUED:
            self._queue.popleft()
            self._dropped += 1
            if self._dropped == 1 or self._dropped % 1000 == 0:
                self._orleanspy_activation.silo.log.warning(
                    "observer_calls_dropped", client=self.key, dropped=self._dropped,
                    reason=f"more than {MAX_QUEUED} calls wait for a client that does not "
                           "poll fast enough")
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def poll(self, wait: float, after: int) -> list[list[Any]]:
        """The calls queued after number ``after`` (``[seq, observer id, method, args,
        kwargs]``), waiting up to ``wait`` seconds for one; those up to ``after`` are
        forgotten (the client ran them)."""
        wait = max(0.0, min(float(wait), MAX_POLL_WAIT))
        self._seen = self._now()
        self._wait = wait
        queue = self._queue
        while queue and queue[0][0] <= after:
            queue.popleft()
        clock = self._orleanspy_activation.silo.clock
        until = clock.monotonic() + wait
        # (in slices: a silo that stops, or a deactivation, ends the wait within one, and
        # its client polls another gateway)
        while not queue and not self._leaving() and (left := until - clock.monotonic()) > 0:
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                async with clock.timeout(min(left, _SLICE)):
                    await waiter
            except TimeoutError:
                pass
            finally:
                if self._waiter is waiter:
                    self._waiter = None
        self._seen = self._now()
        self._wait = 0.0
        return [call for _, call in zip(range(MAX_BATCH), queue, strict=False)]

    async def delete(self, observer_id: str) -> None:
        """The client dropped observer ``observer_id``: calls to it are dropped from now."""
        self._deleted.append(observer_id)
        kept = [c for c in self._queue if c[1] != observer_id]
        self._queue.clear()  # (in place: a poll that waits holds this queue)
        self._queue.extend(kept)

    def _leaving(self) -> bool:
        act = self._orleanspy_activation
        return bool(act.state >= ActivationState.DEACTIVATING or act.silo.stopping)
