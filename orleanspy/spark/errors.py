"""Errors of Spark grains and the Parquet sink (all under ``OrleansPyError``).

Hierarchy::

    OrleansPyError
    └── SparkError
        ├── SparkUnavailableError     pyspark, pyarrow or Java is missing (names the fix)
        ├── SparkJobError             a Spark job failed (message and Spark error class)
        └── SparkJobCancelledError    the job was cancelled (caller, deactivation, shutdown)
            └── SparkJobTimeoutError  the job's ``timeout`` elapsed (also a TimeoutError)

They carry only plain strings in ``args``: no py4j or JVM references ever reach a grain reply.
"""

from __future__ import annotations

from orleanspy.errors import OrleansPyError

__all__ = [
    "SparkError",
    "SparkJobCancelledError",
    "SparkJobError",
    "SparkJobTimeoutError",
    "SparkUnavailableError",
]


class SparkError(OrleansPyError):
    """Root of the Spark errors."""


class SparkUnavailableError(SparkError, RuntimeError):
    """Spark cannot start here: pyspark/pyarrow not installed, no Java, or the session failed.

    The message says what is missing and how to fix it.
    """


class SparkJobError(SparkError):
    """A Spark job failed. ``error_class`` is Spark's error class when it has one."""

    def __init__(self, message: str, error_class: str | None = None) -> None:
        super().__init__(message, error_class)
        self.message = message
        self.error_class = error_class

    def __str__(self) -> str:
        return self.message


class SparkJobCancelledError(SparkError):
    """The job was cancelled: by the caller, a deactivation of its grain or a silo stop."""

    def __init__(self, message: str, job_group: str | None = None) -> None:
        super().__init__(message, job_group)
        self.message = message
        self.job_group = job_group

    def __str__(self) -> str:
        return self.message


class SparkJobTimeoutError(SparkJobCancelledError, TimeoutError):
    """The job ran past its ``timeout`` and was cancelled."""
