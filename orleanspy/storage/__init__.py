"""Grain state storage: the GrainStorage contract and its providers.

Memory and SQLite are exported here; ``orleanspy.storage.redis`` and
``orleanspy.storage.postgres`` are imported from their own modules.
"""

from orleanspy.storage.base import GrainStorage, StoredState
from orleanspy.storage.memory import MemoryGrainStorage
from orleanspy.storage.sqlite import SqliteGrainStorage

__all__ = ["GrainStorage", "MemoryGrainStorage", "SqliteGrainStorage", "StoredState"]
