"""Grain state storage: the GrainStorage contract and its memory and SQLite providers."""

from orleanspy.storage.base import GrainStorage, StoredState
from orleanspy.storage.memory import MemoryGrainStorage
from orleanspy.storage.sqlite import SqliteGrainStorage

__all__ = ["GrainStorage", "MemoryGrainStorage", "SqliteGrainStorage", "StoredState"]
