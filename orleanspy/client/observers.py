"""ObserverReceiver: a ClusterClient's observers and the loop that runs their calls.

``create`` registers an object under a random observer id and returns the reference grains
call (``grains.observer``). The calls wait in the client's ``ClientObserverHub`` grain
(``runtime.observer_hub``); one loop long-polls it through the client's gateways and runs
each on its object, in order: a method that is a coroutine is awaited before the next call
runs. An error a method raises is logged (the grain that called it has moved on: observer
calls are one-way). When a gateway fails the poll raises; the loop backs off briefly and
polls again through another one, naming the last call it ran so that none runs twice.
"""

from __future__ import annotations

import asyncio
import inspect
import secrets
from typing import Any, Final

from orleanspy.errors import OrleansPyError
from orleanspy.grains.observer import OBSERVER_HUB_TYPE, observer_address
from orleanspy.grains.proxy import make_reference
from orleanspy.ids import GrainId
from orleanspy.logging import get_logger

__all__ = ["ObserverReceiver"]

POLL_WAIT: Final = 10.0
_BACKOFF: Final = (0.05, 0.1, 0.2, 0.5, 1.0)

log = get_logger(__name__)


class ObserverReceiver:
    """The observers of one client."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._objects: dict[str, Any] = {}
        self._hub = GrainId(OBSERVER_HUB_TYPE, client.client_id)
        self._after = 0
        self._task: asyncio.Task[None] | None = None

    def create(self, obj: Any, interface: type | None) -> Any:
        observer_id = secrets.token_hex(8)
        self._objects[observer_id] = obj
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop())
        address = observer_address(self._client.client_id, observer_id)
        return make_reference(self._client, interface if interface is not None
                              else address.type_name, address.key, address)

    async def delete(self, reference: Any) -> None:
        observer_id = str(reference.grain_id.key).partition("/")[2]
        if self._objects.pop(observer_id, None) is not None:
            await self._client.call(self._hub, "delete", (observer_id,), None, None)

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _loop(self) -> None:
        failures = 0
        timeout = POLL_WAIT + max(5.0, self._client.options.response_timeout)
        while self._objects:
            try:
                calls = await self._client.call(self._hub, "poll", (POLL_WAIT, self._after),
                                                None, timeout)
            except (OrleansPyError, OSError) as exc:  # a gateway lost: poll another one
                await asyncio.sleep(_BACKOFF[min(failures, len(_BACKOFF) - 1)])
                failures += 1
                if failures in (1, 10):
                    log.info("observer_poll_failed", error=repr(exc), attempt=failures)
                continue
            failures = 0
            for seq, observer_id, method, args, kwargs in calls:
                self._after = seq
                await self._run(observer_id, method, args, kwargs)

    async def _run(self, observer_id: str, method: str, args: list[Any],
                   kwargs: dict[str, Any] | None) -> None:
        obj = self._objects.get(observer_id)
        if obj is None:
            return
        try:
            result = getattr(obj, method)(*args, **(kwargs or {}))
            if inspect.isawaitable(result):
                await result
        except Exception as exc:
            log.warning("observer_call_failed", observer=type(obj).__name__, method=method,
                        error=repr(exc))
