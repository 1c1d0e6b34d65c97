"""Stand-ins for a SparkSession and its backend, for session-manager tests that need no
JVM."""

from __future__ import annotations

import threading
from typing import Any


class FakeSession:
    """A session whose ``stop()`` is observable."""


    def __init__(self) -> None:
        self.stopped = threading.Event()

    def stop(self) -> None:
        self.stopped.set()


class FakeBackend:
    """A backend that does nothing."""


    polls_progress = False

    def __init__(self, spark: Any) -> None:
        self.spark = spark

    def set_log_level(self, level: str) -> None:
        pass

    def cancel_all(self) -> None:
        pass
