"""Assigners by name, for configuration: ``balancer = "sticky" | "even" | "bounded[:EPS]" |
"ring"`` in a stream provider's options or ``[streams.NAME]`` table."""

from __future__ import annotations

from orleanspy.streams.balancing.base import QueueAssigner
from orleanspy.streams.balancing.bounded import BoundedLoadAssigner
from orleanspy.streams.balancing.even import EvenSplitAssigner
from orleanspy.streams.balancing.ring import ConsistentRingAssigner
from orleanspy.streams.balancing.sticky import StickyAssigner

__all__ = ["BALANCER_NAMES", "assigner_named"]

BALANCER_NAMES = ("sticky", "even", "bounded[:EPSILON]", "ring")


def assigner_named(text: str) -> QueueAssigner:
    """The assigner a configuration names.

    Raises:
        ValueError: an unknown name or a bad epsilon, with the names that work.
    """
    name, _, arg = text.strip().partition(":")
    if name == "sticky" and not arg:
        return StickyAssigner()
    if name == "even" and not arg:
        return EvenSplitAssigner()
    if name == "ring" and not arg:
        return ConsistentRingAssigner()
    if name == "bounded":
        try:
            return BoundedLoadAssigner(float(arg)) if arg else BoundedLoadAssigner()
        except ValueError as exc:
            raise ValueError(
                f"balancer {text!r}: epsilon must be a number >= 0, e.g. 'bounded:0.25'"
            ) from exc
    raise ValueError(
        f"unknown balancer {text!r}: use one of {', '.join(BALANCER_NAMES)} "
        "(sticky, the default, is exactly balanced and moves the fewest queues)"
    )
