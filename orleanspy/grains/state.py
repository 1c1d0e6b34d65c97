"""PersistentState[T]: a grain's typed, etag-checked state, read before on_activate."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast, overload

from orleanspy.errors import ConfigurationError

if TYPE_CHECKING:
    from orleanspy.ids import GrainId
    from orleanspy.messaging.codec import Codec

__all__ = ["PersistentState", "StateSpec", "StateStorage", "StoredState", "persistent_state"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StoredState:
    """A state record as stored: msgpack bytes and the etag of that version."""

    data: bytes
    etag: str


class StateStorage(Protocol):
    """The etag-checked store a persistent state reads and writes (``storage.GrainStorage``
    is the full contract of a provider)."""

    async def read(self, grain_id: GrainId, state_name: str) -> StoredState | None: ...

    async def write(
        self, grain_id: GrainId, state_name: str, data: bytes, etag: str | None
    ) -> str: ...

    async def clear(self, grain_id: GrainId, state_name: str, etag: str | None) -> None: ...


class PersistentState(Generic[T]):
    """One named state of one activation.

    ``value`` is the in-memory state (a dataclass instance). Nothing is stored until
    ``await write()``; a write whose etag is stale raises ``InconsistentStateError`` and the
    runtime then deactivates the activation so that the next call reads the stored state.
    On deactivation (idle, requested or silo shutdown) a state whose value changed since it
    was last read or written is written once more (``write_on_deactivate``).
    """

    __slots__ = (
        "_codec",
        "_factory",
        "_grain_id",
        "_last",
        "_name",
        "_storage",
        "etag",
        "record_exists",
        "stream_tokens",
        "value",
    )

    def __init__(
        self,
        factory: Callable[[], T],
        name: str,
        storage: StateStorage,
        grain_id: GrainId,
        codec: Codec,
        *,
        stream_tokens: bool = False,
    ) -> None:
        self._factory = factory
        self._name = name
        self._storage = storage
        self._grain_id = grain_id
        self._codec = codec
        self.value: T = factory()
        self.etag: str | None = None
        self.record_exists = False
        self._last: bytes | None = None
        #: with ``stream_tokens``: "namespace/subscription id" -> (sequence, index) of the last
        #: event of it this grain handled, stored in the record beside ``value`` by the same write
        #: (``orleanspy.streams.effectively_once``); None otherwise
        self.stream_tokens: dict[str, tuple[int, int]] | None = {} if stream_tokens else None

    @property
    def name(self) -> str:
        return self._name

    async def read(self) -> None:
        """Replace ``value`` with the stored state (or a fresh default if none is stored)."""
        stored = await self._storage.read(self._grain_id, self._name)
        if stored is None:
            self.value = self._factory()
            self.etag = None
            self.record_exists = False
            self._last = None
            if self.stream_tokens is not None:
                self.stream_tokens = {}
            return
        if self.stream_tokens is None:
            self.value = self._codec.unpackb(stored.data)
            self._last = stored.data
        else:
            self.value, self.stream_tokens = _split(self._codec.unpackb(stored.data))
            self._last = self._codec.packb(self.value)
        self.etag = stored.etag
        self.record_exists = True

    async def write(self) -> None:
        """Store ``value``; raises ``InconsistentStateError`` if someone else wrote first.
        With stream tokens, the record carries them too (one write, one etag check)."""
        data = self._codec.packb(self.value)
        tokens = self.stream_tokens
        record = data if tokens is None else self._codec.packb(
            [_TOKENS_MARK, self.value, {s: list(t) for s, t in tokens.items()}])
        self.etag = await self._storage.write(self._grain_id, self._name, record, self.etag)
        self.record_exists = True
        self._last = data

    async def clear(self) -> None:
        """Delete the stored record and reset ``value`` to its default."""
        await self._storage.clear(self._grain_id, self._name, self.etag)
        self.value = self._factory()
        self.etag = None
        self.record_exists = False
        self._last = None
        if self.stream_tokens is not None:
            self.stream_tokens = {}

    def is_dirty(self) -> bool:
        """True if ``value`` differs from what was last read or written."""
        current = self._codec.packb(self.value)
        if self._last is None:
            return current != self._codec.packb(self._factory())
        return current != self._last


#: the first item of a record that carries stream tokens: [mark, value, {sub id: [seq, idx]}]
_TOKENS_MARK = "orleanspy.stream_tokens"


def _split(record: Any) -> tuple[Any, dict[str, tuple[int, int]]]:
    """(value, stream tokens) of a stored record; a record written without tokens (before
    the grain opted in) is its value alone, with no tokens."""
    if isinstance(record, list) and len(record) == 3 and record[0] == _TOKENS_MARK:
        return record[1], {str(s): (int(t[0]), int(t[1])) for s, t in record[2].items()}
    return record, {}


class StateSpec(Generic[T]):
    """Class-level declaration of a persistent state (see ``persistent_state``)."""

    __slots__ = ("attr", "factory", "name", "storage", "stream_tokens", "write_on_deactivate")

    def __init__(
        self,
        factory: Callable[[], T],
        name: str | None,
        storage: str,
        write_on_deactivate: bool,
    ) -> None:
        self.factory = factory
        self.name = name
        self.storage = storage
        self.write_on_deactivate = write_on_deactivate
        self.attr = ""
        #: its record also keeps the grain's stream tokens (``streams.effectively_once``)
        self.stream_tokens = False

    def __set_name__(self, owner: type, attr: str) -> None:
        self.attr = attr
        if self.name is None:
            self.name = attr

    @overload
    def __get__(self, obj: None, owner: type) -> StateSpec[T]: ...
    @overload
    def __get__(self, obj: object, owner: type) -> PersistentState[T]: ...
    def __get__(self, obj: object | None, owner: type) -> Any:
        if obj is None:
            return self
        try:
            return obj.__dict__["_orleanspy_states"][self.attr]
        except KeyError:
            raise RuntimeError(
                f"state {self.attr!r} is only available on an activated grain "
                "(not in __init__ of a grain created outside the runtime)"
            ) from None


def persistent_state(
    factory: Callable[[], T],
    *,
    name: str | None = None,
    storage: str = "default",
    write_on_deactivate: bool = True,
) -> StateSpec[T]:
    """Declare a persistent state on a grain class.

    Example::

        @dataclass
        class AccountState:
            balance: int = 0

        class Account(Grain):
            state = persistent_state(AccountState)

            async def deposit(self, amount: int) -> int:
                self.state.value.balance += amount
                await self.state.write()
                return self.state.value.balance

    Args:
        factory: makes the default value, usually the dataclass itself.
        name: the state's name in storage (default: the attribute name).
        storage: the silo's storage provider to use (default ``"default"``).
        write_on_deactivate: write a changed state when the activation deactivates.
    """
    if not callable(factory):
        raise ConfigurationError("persistent_state(factory): factory must be callable")
    if isinstance(factory, type) and not dataclasses.is_dataclass(factory):
        raise ConfigurationError(
            f"persistent_state({factory.__name__}): the state type must be a dataclass"
        )
    return StateSpec(cast("Callable[[], T]", factory), name, storage, write_on_deactivate)
