"""Conformance suites: pytest test classes that check a provider keeps its contract.

Subclass a suite in a test module and implement its factory hook; pytest then runs every
clause of the contract (``orleanspy.storage.base``, ``orleanspy.reminders.base``) against
your provider::

    from orleanspy.testing.conformance import GrainStorageConformance

    class TestMyStorage(GrainStorageConformance):
        async def make_storage(self, tmp_path: Path) -> GrainStorage:
            return MyStorage(str(tmp_path / "state.db"))

The hook returns a new, unopened provider; the suite opens it before each test and closes
it afterwards. The suites need pytest and pytest-asyncio (any ``asyncio_mode``).

One module per contract (``storage``, ``reminders``), so that a provider's author reads only
the clauses of the contract they implement; the keys both suites check live in ``keys``.
"""

from orleanspy.testing.conformance.keys import DISTINCT_KEYS, key_shape
from orleanspy.testing.conformance.reminders import ReminderTableConformance
from orleanspy.testing.conformance.storage import GrainStorageConformance

__all__ = ["DISTINCT_KEYS", "GrainStorageConformance", "ReminderTableConformance", "key_shape"]
