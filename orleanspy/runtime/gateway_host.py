"""What a gateway needs from its silo (``GatewayHost``: settings, logger, codec, clock,
fence, and the dispatcher it hands requests to), and ``SentOn``, a client's request the
gateway sent straight on to another silo."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from orleanspy._util.clock import Clock
from orleanspy.ids import GrainId
from orleanspy.messaging.codec import Codec
from orleanspy.messaging.message import Message
from orleanspy.runtime.locator import RequestForwarder

__all__ = ["GatewayDeliverer", "GatewayHost", "GatewayOptions", "SentOn"]


class GatewayOptions(Protocol):
    """The settings a gateway reads from its silo's options."""

    @property
    def host(self) -> str: ...
    @property
    def advertised_host(self) -> str: ...
    @property
    def gateway_port(self) -> int | None: ...
    @property
    def cluster_id(self) -> str: ...
    @property
    def secret(self) -> str | None: ...
    @property
    def max_frame_size(self) -> int: ...
    @property
    def handshake_timeout(self) -> float: ...
    @property
    def max_pending_handshakes(self) -> int: ...
    @property
    def max_connection_requests(self) -> int: ...
    @property
    def max_client_requests(self) -> int: ...


class GatewayDeliverer(Protocol):
    """Where a gateway hands its clients' requests: the silo's dispatcher."""

    @property
    def local_only(self) -> bool: ...

    def deliver(self, msg: Message) -> None: ...

    def cancel(self, msg: Message) -> None: ...

    def connection_for(self, grain_id: GrainId) -> RequestForwarder | None: ...


#: A client's request sent straight on to another silo: its connection and its id there
#: (where a cancel follows it). A plain tuple: one is made for every such request.
SentOn = tuple[RequestForwarder, int]


class GatewayHost(Protocol):
    """What the gateway needs from its silo: settings, logger, codec and dispatcher."""

    @property
    def name(self) -> str: ...
    @property
    def options(self) -> GatewayOptions: ...
    @property
    def log(self) -> Any: ...
    @property
    def codec(self) -> Codec: ...
    @property
    def dispatcher(self) -> GatewayDeliverer: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def fence(self) -> Callable[[], bool] | None:
        """True while the silo must not serve (see ``ClusterRuntime.fenced``); None: never."""
        ...
