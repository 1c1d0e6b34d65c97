"""Assigners chosen by name (``balancer = "..."`` in a stream provider's options)."""

from __future__ import annotations

import pytest

from orleanspy.errors import ConfigurationError
from orleanspy.streams.balancing import (
    BoundedLoadAssigner,
    ConsistentRingAssigner,
    EvenSplitAssigner,
    StickyAssigner,
)
from orleanspy.streams.balancing.named import assigner_named
from orleanspy.streams.options import StreamProviderOptions


@pytest.mark.parametrize(("text", "cls"), [
    ("sticky", StickyAssigner), ("even", EvenSplitAssigner), ("ring", ConsistentRingAssigner),
    ("bounded", BoundedLoadAssigner), (" bounded:0.1 ", BoundedLoadAssigner),
])
def test_assigner_named(text: str, cls: type) -> None:
    assert type(assigner_named(text)) is cls


def test_bounded_epsilon_is_taken() -> None:
    assigner = assigner_named("bounded:0.1")
    assert isinstance(assigner, BoundedLoadAssigner) and assigner.epsilon == 0.1


@pytest.mark.parametrize("text", ["fast", "sticky:1", "bounded:x", "bounded:-1", ""])
def test_bad_balancer_names_the_key_and_the_choices(text: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        StreamProviderOptions(balancer=text)
    message = str(info.value)
    assert "StreamProviderOptions.balancer" in message
    assert "sticky" in message or "epsilon" in message


def test_default_is_sticky() -> None:
    assert StreamProviderOptions().balancer == "sticky"
