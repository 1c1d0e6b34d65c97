"""A client's identity: the id it names in its gateway handshake, and the key that proves it.

A client makes a random key (``CLIENT_KEY_SIZE`` bytes) and keeps it for its life; its id is
derived from the key (``client_id_of``: ``client-`` and 128 bits of a SHA-256 of the key). It
presents both in every gateway handshake (``client_handshake``), and a gateway accepts the id
only with the key it is derived from (``check_client``). So:

* an id seen in metrics, pages or logs cannot be claimed: the hash does not give the key back,
  and the id cannot be guessed;
* any gateway of the cluster checks an id with no state shared with the others, so a client
  that loses its gateway reconnects through another as the same client (its stream
  subscriptions follow it), even after every silo restarted;
* a connection acts as the one id it proved (the gateway lets it reach only that id's
  ``ClientStreamConsumer``): minting ids costs a connection each.

The key travels in the handshake as the client secret does: the ports have no encryption, so
a listener on the network path can read both (docs/security.md, "Limits").
"""

from __future__ import annotations

import hashlib
import hmac
import os
from typing import Any, Final

from orleanspy.messaging.frames import PROTOCOL_VERSION

__all__ = ["CLIENT_KEY_SIZE", "check_client", "client_handshake", "client_id_of"]

#: Bytes of a client's key (its handshake's ``key``).
CLIENT_KEY_SIZE: Final = 32


def client_id_of(key: bytes) -> str:
    """The client id that ``key`` proves."""
    return "client-" + hashlib.sha256(b"orleanspy client id\0" + key).hexdigest()[:32]


def client_handshake(cluster_id: str, secret: str | None, key: bytes | None = None
                     ) -> dict[str, Any]:
    """A client's opening handshake map, proving the id of ``key`` (a fresh random key when
    None: a new client)."""
    if key is None:
        key = os.urandom(CLIENT_KEY_SIZE)
    return {"v": PROTOCOL_VERSION, "cluster": cluster_id, "secret": secret,
            "client": client_id_of(key), "key": key}


def check_client(obj: dict[str, Any]) -> tuple[str | None, str]:
    """``(None, id)``: the id an accepted handshake (``frames.check_handshake``) proves;
    ``(why, "")``: it proves none, because it lacks a ``key`` of ``CLIENT_KEY_SIZE`` bytes or
    names an id that is not the key's."""
    key = obj.get("key")
    if type(key) is not bytes or len(key) != CLIENT_KEY_SIZE:
        return (f"no client key: a client proves its id with the {CLIENT_KEY_SIZE}-byte key "
                "it is derived from (upgrade the client)"), ""
    proven = client_id_of(key)
    claimed = obj.get("client")
    if type(claimed) is not str or not hmac.compare_digest(claimed.encode(), proven.encode()):
        return f"client id {str(claimed)[:80]!r} is not the id of the key presented", ""
    return None, proven
