"""Membership rows: one ``MembershipEntry`` per silo, the table version, and their msgpack form.

Times are wall-clock epoch seconds (``Clock.time()``): rows are shared between processes,
and a vote or an I-am-alive written by one silo is read against another silo's clock.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgpack

from orleanspy.errors import MembershipError
from orleanspy.ids import SiloAddress

__all__ = [
    "MembershipEntry",
    "MembershipTableData",
    "SiloStatus",
    "SuspectVote",
    "TableVersion",
    "decode_entry",
    "encode_entry",
]


class SiloStatus(enum.Enum):
    """Where a silo is in its life. ``STOPPED`` and ``DEAD`` are final for an address
    (host, port, generation): ``STOPPED`` is written by the silo itself when it leaves
    gracefully (or rolls back a start), ``DEAD`` by the others when they declared it dead
    (it crashed or could not be reached). Both rows are deleted by the defunct-row cleanup
    once older than ``defunct_silo_expiration``."""

    JOINING = "joining"
    ACTIVE = "active"
    SHUTTING_DOWN = "shutting_down"
    STOPPED = "stopped"
    DEAD = "dead"

    @property
    def is_terminating(self) -> bool:
        return self is SiloStatus.SHUTTING_DOWN or self.is_gone

    @property
    def is_gone(self) -> bool:
        """Final: the silo stopped or was declared dead, and never serves again."""
        return self is SiloStatus.DEAD or self is SiloStatus.STOPPED


@dataclass(frozen=True, slots=True)
class SuspectVote:
    """``voter`` suspected the row's silo at ``time`` (epoch seconds)."""

    voter: SiloAddress
    time: float


@dataclass(frozen=True, slots=True, kw_only=True)
class MembershipEntry:
    """One silo's row. Immutable: change it with ``dataclasses.replace``.

    ``gateway_port`` is the port clients connect to (None: the silo has no gateway).
    ``suspect_votes`` are the votes cast against this silo, oldest first.
    ``declared_dead_at`` and ``declared_dead_by`` say when the row was written DEAD and by
    which silos (the voters whose fresh votes declared it, or the newer generation of its
    endpoint that replaced it); 0.0 and () while it is not DEAD.
    """

    silo: SiloAddress
    status: SiloStatus
    silo_name: str = ""
    host_name: str = ""
    gateway_port: int | None = None
    start_time: float = 0.0
    i_am_alive_time: float = 0.0
    suspect_votes: tuple[SuspectVote, ...] = field(default=())
    declared_dead_at: float = 0.0
    declared_dead_by: tuple[SiloAddress, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class TableVersion:
    """The version of the whole table: ``version`` counts membership writes; ``etag`` is new
    with every write, so a version number reused after ``delete_table`` never matches."""

    version: int
    etag: str


@dataclass(frozen=True, slots=True)
class MembershipTableData:
    """Rows ``(entry, etag)`` and the table version, read from one consistent snapshot."""

    rows: tuple[tuple[MembershipEntry, str], ...]
    version: TableVersion

    def get(self, silo: SiloAddress) -> tuple[MembershipEntry, str] | None:
        """The row of ``silo`` with its etag, or None."""
        for row in self.rows:
            if row[0].silo == silo:
                return row
        return None

    def entries(self) -> Iterator[MembershipEntry]:
        return (entry for entry, _ in self.rows)

    def __len__(self) -> int:
        return len(self.rows)


def _silo(value: Any) -> SiloAddress:
    host, port, generation = value
    return SiloAddress(str(host), int(port), int(generation))


def encode_entry(entry: MembershipEntry) -> bytes:
    """The entry as msgpack bytes (every field; back ends may keep I-am-alive apart)."""
    silo = entry.silo
    data: bytes = msgpack.packb(
        {
            "silo": [silo.host, silo.port, silo.generation],
            "status": entry.status.value,
            "name": entry.silo_name,
            "host_name": entry.host_name,
            "gateway_port": entry.gateway_port,
            "start": float(entry.start_time),
            "alive": float(entry.i_am_alive_time),
            "votes": [
                [v.voter.host, v.voter.port, v.voter.generation, float(v.time)]
                for v in entry.suspect_votes
            ],
            "dead_at": float(entry.declared_dead_at),
            "dead_by": [[s.host, s.port, s.generation] for s in entry.declared_dead_by],
        },
        use_bin_type=True,
    )
    return data


def decode_entry(data: bytes) -> MembershipEntry:
    """Inverse of ``encode_entry``; a malformed row raises ``MembershipError``."""
    try:
        raw = msgpack.unpackb(data, raw=False)
        return MembershipEntry(
            silo=_silo(raw["silo"]),
            status=SiloStatus(raw["status"]),
            silo_name=str(raw["name"]),
            host_name=str(raw["host_name"]),
            gateway_port=None if raw["gateway_port"] is None else int(raw["gateway_port"]),
            start_time=float(raw["start"]),
            i_am_alive_time=float(raw["alive"]),
            suspect_votes=tuple(
                SuspectVote(_silo(vote[:3]), float(vote[3])) for vote in raw["votes"]
            ),
            # Rows written without them (by an older release) decode as never declared.
            declared_dead_at=float(raw.get("dead_at", 0.0)),
            declared_dead_by=tuple(_silo(s) for s in raw.get("dead_by", ())),
        )
    except (ValueError, KeyError, TypeError, msgpack.UnpackException) as exc:
        raise MembershipError(f"malformed membership row ({exc!r})") from exc
