"""StreamedResponse: the caller's side of a call to an async generator grain method.

``ref.items(...)`` of a method written ``async def items(self, ...): ... yield x`` returns a
``StreamedResponse``, an async iterator: the first ``__anext__`` makes the call (answered
with the first items and a token), later ones pull batches of ``batch`` items with
``__orleanspy_stream_pull__(token, batch)`` through the same runtime (a silo's dispatcher
or a client's gateway), one batch ahead of what the caller has taken, so the caller holds at
most two batches and the grain's generator runs at most one batch ahead of it
(``runtime.streamed_calls``).

Stopping early: ``aclose()`` (or ``async with ref.items() as items:``, which closes on
exit) ends the generator on the grain at once. An iterator dropped unfinished without
``aclose`` is closed from its finalizer when its loop still runs, and by the grain after
the call's timeout without a pull otherwise.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING, Any, Final, Protocol, Self

from orleanspy.ids import GrainId

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["DEFAULT_BATCH", "StreamedResponse"]

#: items asked for per pull
DEFAULT_BATCH: Final = 256
_PULL: Final = "__orleanspy_stream_pull__"
_CLOSE: Final = "__orleanspy_stream_close__"


class RuntimeClient(Protocol):
    """What the iterator needs from its runtime (a silo or a ClusterClient): the calls of
    ``grains.proxy.RuntimeClient``."""

    async def call(self, grain_id: GrainId, method: str, args: tuple[Any, ...],
                   kwargs: dict[str, Any] | None, timeout: float | None) -> Any: ...

    async def send_one_way(self, grain_id: GrainId, method: str, args: tuple[Any, ...],
                           kwargs: dict[str, Any] | None) -> None: ...


class StreamedResponse:
    """An async iterator over the items a grain's async generator method yields."""

    __slots__ = ("_args", "_batch", "_buffer", "_done", "_grain_id", "_kwargs", "_loop",
                 "_method", "_next", "_runtime", "_timeout", "_token")

    def __init__(self, runtime: RuntimeClient, grain_id: GrainId, method: str,
                 args: tuple[Any, ...], kwargs: dict[str, Any] | None,
                 timeout: float | None, batch: int = DEFAULT_BATCH) -> None:
        if batch < 1:
            raise ValueError(f"batch={batch}: a streamed response pulls at least 1 item")
        self._runtime = runtime
        self._grain_id = grain_id
        self._method = method
        self._args = args
        self._kwargs = kwargs
        self._timeout = timeout
        self._batch = batch
        self._buffer: deque[Any] = deque()
        self._token: str | None = None
        self._done = False
        self._next: asyncio.Task[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        state = "done" if self._done else ("open" if self._token else "not started")
        return f"<StreamedResponse {self._grain_id}.{self._method} {state}>"

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Any:
        buffer = self._buffer
        while not buffer:
            if self._done and self._next is None:
                raise StopAsyncIteration
            await self._fetch()
        return buffer.popleft()

    async def _fetch(self) -> None:
        if self._token is None and not self._done:  # the call itself
            self._loop = asyncio.get_running_loop()
            answer = await self._runtime.call(self._grain_id, self._method, self._args,
                                              self._kwargs, self._timeout)
            self._token = answer["id"]
        else:
            pending = self._next
            assert pending is not None
            self._next = None
            answer = await pending
        self._buffer.extend(answer["items"])
        if answer["done"]:
            self._done = True
        else:  # the next batch is on its way while the caller takes this one
            self._next = asyncio.ensure_future(self._runtime.call(
                self._grain_id, _PULL, (self._token, self._batch), None, self._timeout))

    async def aclose(self) -> None:
        """Stop early: the grain's generator is closed (its ``finally`` blocks run) and
        the activation serves its other requests again."""
        pending, self._next = self._next, None
        ended = self._done  # the grain said it is done: nothing is open there
        self._done = True
        self._buffer.clear()
        if pending is not None:
            if not pending.done():
                pending.cancel()  # (a pull given up ends the iteration on the grain too)
            outcome: Any = (await asyncio.gather(pending, return_exceptions=True))[0]
            # a pull that failed ended the iteration; one answered may have left it open
            ended = not isinstance(outcome, dict) or bool(outcome.get("done"))
            if isinstance(outcome, asyncio.CancelledError):
                ended = False  # (it may have been answered on the grain before the cancel)
        if not ended and self._token is not None:
            await self._runtime.call(self._grain_id, _CLOSE, (self._token,), None,
                                     self._timeout)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    def __del__(self) -> None:
        if self._done or self._token is None:
            return
        loop = self._loop
        pending = self._next
        if pending is not None:
            pending.cancel()
        elif loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(_close_later, self._runtime, self._grain_id, self._token)


def _close_later(runtime: RuntimeClient, grain_id: GrainId, token: str) -> None:
    """Close an iterator dropped unfinished (from its finalizer; best effort)."""
    task = asyncio.ensure_future(runtime.send_one_way(grain_id, _CLOSE, (token,), None))
    task.add_done_callback(_retrieve)


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()
