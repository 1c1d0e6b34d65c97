"""Durable reminders: the ReminderTable contract, its providers and the reminder service."""

from orleanspy.reminders.base import ReminderEntry, ReminderTable
from orleanspy.reminders.memory import MemoryReminderTable
from orleanspy.reminders.sqlite import SqliteReminderTable

__all__ = ["MemoryReminderTable", "ReminderEntry", "ReminderTable", "SqliteReminderTable"]
