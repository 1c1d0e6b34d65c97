"""Conformance suite for queue adapters: every clause of ``orleanspy.streams.adapters.base``.

Subclass ``QueueAdapterConformance`` in a test module and implement ``make_factory``; pytest
then checks the adapter contract (the producer side (1)->(2) and the receiver side (2)->(3) of
the stream data path)::

    from orleanspy.testing.stream_conformance import QueueAdapterConformance

    class TestMyAdapter(QueueAdapterConformance):
        at_least_once = True  # unacknowledged containers return to the next receiver
        durable = True  # ... also after the adapter is reopened on the same storage

        async def make_factory(self, tmp_path: Path) -> QueueAdapterFactory:
            return MyAdapterFactory(str(tmp_path / "queues.db"))

``make_factory`` may be called more than once with the same ``tmp_path``: the durable clauses
reopen the adapter on the same storage. The rewind clauses (``read_from``) run for adapters
whose ``is_rewindable`` is True; for the others the suite checks that ``read_from`` raises
``NotImplementedError``. The suite needs pytest and pytest-asyncio.

The suite is one test class assembled from clause groups, one module each: adapter and
receiver lifecycle (``lifecycle``), the producer side (``enqueue``), the receiver side
(``reading``), what crosses a queue (``events``), rewinding (``rewind``) and what is kept of
unacknowledged containers (``reliability``), over the kit they share (``kit``: the fixture,
the adapter's declared properties, the helpers).
"""

from orleanspy.testing.stream_conformance.enqueue import EnqueueClauses
from orleanspy.testing.stream_conformance.events import ROUND_TRIP_EVENTS as ROUND_TRIP_EVENTS
from orleanspy.testing.stream_conformance.events import (
    EventClauses,
    SampleEvent,
    SampleKind,
    event_shape,
)
from orleanspy.testing.stream_conformance.lifecycle import LifecycleClauses
from orleanspy.testing.stream_conformance.reading import ReadClauses
from orleanspy.testing.stream_conformance.reliability import ReliabilityClauses
from orleanspy.testing.stream_conformance.rewind import RewindClauses

__all__ = ["QueueAdapterConformance", "SampleEvent", "SampleKind", "event_shape"]


class QueueAdapterConformance(
    LifecycleClauses, EnqueueClauses, ReadClauses, EventClauses, RewindClauses, ReliabilityClauses
):
    """Every clause of the queue adapter contract. Subclass and implement ``make_factory``.

    Set ``at_least_once = True`` for adapters that keep unacknowledged containers for the
    next receiver of the queue (in this process), and ``durable = True`` for adapters that
    keep them across a reopen of the adapter (a restart of the process); ``durable`` implies
    ``at_least_once``. The clauses of a property the adapter lacks are skipped.
    """
