"""A stream event published under a request context round-trips through the codec with it;
a decoded context its publisher's ``RequestContext.set`` could not have made (bytes from a
client, say) is dropped, keeping the event."""

from __future__ import annotations

import msgpack
import pytest

from orleanspy.messaging.codec import EXT_CONTEXT_EVENT, Codec
from orleanspy.messaging.context_event import MAX_CONTEXT_BYTES, ContextEvent


def test_an_event_and_its_context_round_trip() -> None:
    codec = Codec()
    event = ContextEvent({"n": 1}, {"tenant": "acme", "trace": b"\x01", "n": 3})
    assert codec.unpackb(codec.packb([event])) == [event]


def _forged(context: object, item: object = 7) -> bytes:
    inner = msgpack.packb([context, item], use_bin_type=True)
    return msgpack.packb([msgpack.ExtType(EXT_CONTEXT_EVENT, inner)], use_bin_type=True)


@pytest.mark.parametrize("context", [
    {"tenant": [1, 2]},                       # not a scalar
    {1: "x"},                                 # not a str key
    {"blob": "x" * (MAX_CONTEXT_BYTES + 1)},  # over the size bound
    ["tenant", "acme"],                       # not a mapping
])
def test_a_context_that_breaks_the_rules_is_dropped_and_the_event_kept(context: object) -> None:
    (event,) = Codec().unpackb(_forged(context))
    assert type(event) is ContextEvent
    assert event.item == 7 and event.context is None
