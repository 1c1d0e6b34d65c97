"""The requests one proven gateway client has in flight on a silo (``ClientLoad``), and the
pausing and resuming of its connections at their caps (``runtime/gateway.py`` counts)."""

from __future__ import annotations

from typing import Any, Final, Protocol

__all__ = ["NO_CLIENT", "ClientLoad", "CountedConnection"]


class CountedConnection(Protocol):
    """What a client's load reads and drives of a gateway connection."""

    requests: int
    shared: bool
    cap: int
    client_cap: int
    pauses: int
    client: str
    reading_paused: bool

    @property
    def closed(self) -> bool: ...
    @property
    def peer(self) -> str: ...
    @property
    def log(self) -> Any: ...
    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...


class ClientLoad:
    """The requests one proven client has in flight on this silo, over all its connections
    (those of a closed connection count until they finish, so reconnecting frees nothing).

    A client with one connection is counted by that connection alone (the client's cap is at
    least the connection's, so the connection's cap holds first): ``requests`` is kept only
    once a second connection comes (``GatewayConnection.shared``), and then for good."""

    __slots__ = ("client", "connections", "members", "paused", "requests")

    def __init__(self, client: str) -> None:
        self.client = client
        #: its requests in flight, kept while its connections are shared (``total``)
        self.requests = 0
        #: its open connections (the gateway pauses and resumes them together at its cap)
        self.connections: list[CountedConnection] = []
        #: its connections with requests counted: the open ones and the closed ones whose
        #: requests have not all finished
        self.members: list[CountedConnection] = []
        #: how many of them are not read now
        self.paused = 0

    def total(self) -> int:
        """Its requests in flight on this silo."""
        if len(self.members) > 1 or any(m.shared for m in self.members):
            return self.requests
        return sum(m.requests for m in self.members)

    def join(self, conn: CountedConnection) -> None:
        """``conn`` proved this client: counted with the others from now on."""
        others = self.members
        if others:
            if not others[0].shared:  # a second member: the client's count starts here
                self.requests = sum(m.requests for m in others)
                for m in others:
                    m.shared = True
            conn.shared = True
        others.append(conn)
        self.connections.append(conn)

    def hold(self, conn: CountedConnection) -> None:
        """``conn``, or this client, is at its cap of requests in flight: stop reading it
        (at the client's cap, every connection of the client)."""
        client_requests = self.total()
        held = list(self.connections) if client_requests >= conn.client_cap else [conn]
        for c in held:
            if c.reading_paused or c.closed:
                continue
            c.pauses += 1
            (c.log.warning if c.pauses == 1 else c.log.debug)(
                "gateway_connection_paused", peer=c.peer, client=c.client,
                reason=f"{c.requests} requests of this connection (at most "
                       f"{c.cap}) and {client_requests} of its client (at most "
                       f"{c.client_cap}) are in flight: not reading until both are at "
                       "half",
                times=c.pauses,
            )
            c.pause_reading()
            self.paused += 1

    def resume(self, client_cap: int) -> None:
        """Read the client's paused connections again that are at half their cap, once the
        client is at half of ``client_cap``."""
        if self.total() > client_cap // 2:
            return
        for c in list(self.connections):
            if c.reading_paused and not c.closed and c.requests <= c.cap // 2:
                self.paused -= 1
                c.log.debug("gateway_connection_resumed", peer=c.peer, client=c.client,
                            times=c.pauses)
                c.resume_reading()



#: the load of a connection before its handshake (it delivers nothing then)
NO_CLIENT: Final = ClientLoad("?")
