"""SiloIdentity: the address, name and logger of one silo, shared by the parts that read them.

A lone silo's address is fixed when it is built. A cluster silo listens on ``options.port``,
and port 0 lets the system pick one: its address is known only once the transport listens.
The silo, the grain directory and the placement director hold this one object and read
``address`` on use; the cluster runtime calls ``bind`` as part of its start, so no component
is replaced or handed a new address after construction.
"""

from __future__ import annotations

import time
from typing import Any

from orleanspy.ids import SiloAddress
from orleanspy.logging import get_logger

__all__ = ["SiloIdentity", "new_generation"]


def new_generation() -> int:
    """Milliseconds since 2022-01-01: a restart on the same host and port is a new silo."""
    return int(time.time() * 1000) - 1_640_995_200_000


class SiloIdentity:
    """Who this silo is: ``address`` (host, port, generation), ``name`` (``host:port``) and
    ``log`` (a logger bound to both)."""

    __slots__ = ("address", "cluster_id", "log", "name")

    def __init__(self, address: SiloAddress, cluster_id: str) -> None:
        self.cluster_id = cluster_id
        self.address = address
        self.name = ""
        self.log: Any = None
        self.bind(address)

    def bind(self, address: SiloAddress) -> None:
        """The address the silo listens on (the transport's bound port)."""
        self.address = address
        self.name = f"{address.host}:{address.port}"
        self.log = get_logger("orleanspy.silo", silo=self.name, cluster=self.cluster_id)
