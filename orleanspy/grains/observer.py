"""Observers: an object in a client that grains call back, and the set a grain keeps of them.

A client makes an observer reference from any object (``ClusterClient.create_observer(obj,
IChat)``) and hands it to a grain as an argument. The reference addresses
``orleanspy.Observer/<client id>/<observer id>``: an address, never an activation. Each
method called on it is a one-way call of ``notify(observer id, method, args, kwargs)`` on
the client's ``ClientObserverHub`` grain (``runtime.observer_hub``, keyed by the client's
id), which the client long-polls through any of its gateways and runs on the object
(``client.observers``). So a grain's call to an observer returns once it is queued, and a
gateway failover of the client loses nothing queued.

``ObserverManager`` is what a grain keeps its observers in (Orleans' observer manager
pattern): observers subscribe again within ``expiry`` or are dropped, so a client that went
away without unsubscribing is forgotten.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any, Final

from orleanspy.ids import GrainId

__all__ = ["OBSERVER_HUB_TYPE", "OBSERVER_TYPE", "ObserverManager", "is_observer",
           "observer_address", "observer_methods"]

#: the grain type of an observer's address (never activated)
OBSERVER_TYPE: Final = "orleanspy.Observer"
#: the grain that queues a client's observer calls, keyed by the client's id
OBSERVER_HUB_TYPE: Final = "orleanspy.ClientObserverHub"


def observer_address(client_id: str, observer_id: str) -> GrainId:
    return GrainId(OBSERVER_TYPE, f"{client_id}/{observer_id}")


def is_observer(grain_id: GrainId) -> bool:
    return grain_id.type_name == OBSERVER_TYPE


def observer_methods(cls: type | None) -> list[str]:
    """The methods an observer reference of interface ``cls`` has (its public ``async
    def`` and plain methods); none for an untyped one (any attribute is a method)."""
    if cls is None:
        return []
    return [name for name, fn in inspect.getmembers(cls, inspect.isfunction)
            if not name.startswith("_")]


class ObserverManager:
    """The observers a grain calls back, each kept until ``expiry`` seconds after it last
    subscribed (subscribe again to stay).

    ``clock``: a function giving monotonic seconds (a grain passes
    ``self.silo.clock.monotonic``).
    """

    def __init__(self, expiry: float, clock: Callable[[], float]) -> None:
        if expiry <= 0:
            raise ValueError(f"expiry={expiry}: observers must be kept for a time > 0")
        self.expiry = expiry
        self._clock = clock
        self._observers: dict[Any, tuple[Any, float]] = {}

    def subscribe(self, observer: Any) -> None:
        """Keep ``observer`` (again) for ``expiry`` seconds from now."""
        self._observers[_identity(observer)] = (observer, self._clock() + self.expiry)

    def unsubscribe(self, observer: Any) -> None:
        self._observers.pop(_identity(observer), None)

    def __len__(self) -> int:
        self._expire()
        return len(self._observers)

    def __iter__(self) -> Iterator[Any]:
        self._expire()
        return iter([observer for observer, _ in self._observers.values()])

    async def notify(self, method: str, *args: Any, **kwargs: Any) -> int:
        """Call ``method`` on every live observer (one-way: it returns once the calls are
        queued); returns how many were called. An observer that cannot be called (its
        client's hub refuses, say) is dropped."""
        called = 0
        for observer in list(self):
            try:
                await getattr(observer, method)(*args, **kwargs)
            except Exception:
                self.unsubscribe(observer)
                continue
            called += 1
        return called

    def _expire(self) -> None:
        now = self._clock()
        gone = [key for key, (_, until) in self._observers.items() if until <= now]
        for key in gone:
            del self._observers[key]


def _identity(observer: Any) -> Any:
    grain_id = getattr(observer, "grain_id", None)
    return grain_id if isinstance(grain_id, GrainId) else id(observer)
