"""A client's id is derived from its key, and a handshake proves an id only with that key."""

from __future__ import annotations

import os
import re

import msgpack

from orleanspy.messaging.client_identity import (
    CLIENT_KEY_SIZE,
    check_client,
    client_handshake,
    client_id_of,
)
from orleanspy.messaging.frames import PROTOCOL_VERSION, check_handshake


def test_an_id_is_a_hash_of_its_key_and_reveals_nothing_guessable() -> None:
    key = os.urandom(CLIENT_KEY_SIZE)
    assert client_id_of(key) == client_id_of(bytes(key))
    assert re.fullmatch(r"client-[0-9a-f]{32}", client_id_of(key))
    assert client_id_of(key) != client_id_of(os.urandom(CLIENT_KEY_SIZE))
    assert key.hex() not in client_id_of(key)


def test_a_handshake_proves_the_id_of_its_key_after_a_msgpack_round_trip() -> None:
    hello = msgpack.unpackb(msgpack.packb(client_handshake("c", "s")), raw=False)
    assert hello["v"] == PROTOCOL_VERSION
    assert check_handshake(hello, "c", "s") is None
    assert check_client(hello) == (None, hello["client"])


def test_an_id_without_its_key_proves_nothing() -> None:
    victim = client_handshake("c", None)
    attacker = client_handshake("c", None)
    cases = {
        "no key": {**victim, "key": None},
        "a key of another size": {**victim, "key": victim["key"][:16]},
        "a key as text": {**victim, "key": victim["key"].hex()},
        "another client's key": {**attacker, "client": victim["client"]},
        "no id": {k: v for k, v in victim.items() if k != "client"},
        "an id that is not text": {**victim, "client": [victim["client"]]},
    }
    for case, hello in cases.items():
        error, proven = check_client(hello)
        assert error is not None and proven == "", case
        assert "client key" in error or "not the id of the key" in error, (case, error)
