"""GatewayDiscovery: the gateways of the active silos, read from the cluster's membership table.

The client reads the table the silos write (``ClientOptions.membership``, parsed like a
silo's ``membership`` URL) and never writes it: a table file that does not exist is not
created, and a table that cannot be read leaves the client's list as it is.
"""

from __future__ import annotations

import os
from typing import Any, final

from orleanspy._util.urls import parse_backend_url
from orleanspy.cluster.membership import MembershipTable, SiloStatus, SqliteMembershipTable
from orleanspy.cluster.membership.postgres import PostgresMembershipTable
from orleanspy.cluster.membership.redis import RedisMembershipTable

__all__ = ["GatewayDiscovery"]


@final
class GatewayDiscovery:
    """Reads ``host:gateway_port`` of every ACTIVE silo from the membership table.

    Args:
        url: ``sqlite:PATH`` or ``sqlite://PATH`` (relative to the current directory), or
            ``redis://HOST:PORT/DB?prefix=P`` or ``postgresql://HOST:PORT/DB?schema=S``.
        cluster_id: the cluster whose rows are read.
        log: the client's logger (an unreadable table is a warning, not an error).
    """

    __slots__ = ("_cluster_id", "_log", "_path", "_postgres", "_redis", "_url")

    def __init__(self, url: str, cluster_id: str, log: Any) -> None:
        parsed = parse_backend_url(url, key="ClientOptions.membership",
                                   allow=frozenset({"sqlite", "redis", "postgres"}),
                                   example="sqlite:membership.db")
        self._url = url
        self._redis = parsed.scheme == "redis"
        self._postgres = parsed.scheme == "postgres"
        self._path = parsed.path
        self._cluster_id = cluster_id
        self._log = log

    async def gateways(self) -> list[str] | None:
        """The gateway addresses of the active silos, or None when the table is unreadable."""
        table: MembershipTable
        if self._redis:
            table = RedisMembershipTable(self._url, cluster_id=self._cluster_id)
        elif self._postgres:
            table = PostgresMembershipTable(self._url, cluster_id=self._cluster_id)
        elif not _is_file(self._path):  # do not create an empty table where none is
            self._log.warning("client_membership_unreadable", membership=self._url,
                              error="no such file")
            return None
        else:
            table = SqliteMembershipTable(self._path, cluster_id=self._cluster_id)
        try:
            data = await table.read_all()
        except Exception as exc:  # a locked or foreign file: keep the list, try again later
            self._log.warning("client_membership_unreadable", membership=self._url,
                              error=repr(exc))
            return None
        finally:
            await table.close()
        return [
            f"{entry.silo.host}:{entry.gateway_port}"
            for entry in data.entries()
            if entry.status is SiloStatus.ACTIVE and entry.gateway_port
        ]


def _is_file(path: str) -> bool:
    return os.path.isfile(path)
