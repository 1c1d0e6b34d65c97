"""Spark and py4j errors raised by a job: recognising them, and translating them into the
plain errors of ``errors.py`` (no JVM reference ever reaches a grain reply).

A module of its own because both the job runner (a job's outcome) and its cancel loop (what
Spark said while cancelling) read these errors, and the rules are Spark's, not the runner's:
which modules raise them, where py4j puts the meaningful line, which words mean "cancelled".
"""

from __future__ import annotations

from orleanspy.spark.errors import (
    SparkJobCancelledError,
    SparkJobError,
    SparkUnavailableError,
)
from orleanspy.spark.job import _Op

__all__ = ["CANCELLED_MARKERS", "first_line", "is_spark_error", "translate"]

#: Words of a Spark error that mean its job was cancelled (the first two always, the others
#: only when the runner asked for a cancel).
CANCELLED_MARKERS = ("SPARK_JOB_CANCELLED", "OPERATION_CANCELED", "cancelled as part of",
                     "was cancelled", "Job group", "cancelled because")


def is_spark_error(exc: BaseException) -> bool:
    """True for an error raised by py4j or pyspark (not by the job's own code)."""
    module = type(exc).__module__
    return module.startswith(("py4j", "pyspark"))


def first_line(exc: BaseException) -> str:
    """The first meaningful line of a Spark/py4j error (py4j puts it after a preamble)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    for line in lines:
        if line.startswith(("org.apache.spark", "[")) or "Exception:" in line:
            return line.removeprefix(": ")
    return lines[0] if lines else type(exc).__name__


def translate(exc: BaseException, op: _Op) -> BaseException:
    """Spark and py4j errors -> plain SparkJobError/SparkJobCancelledError (no JVM refs)."""
    if isinstance(exc, (SparkUnavailableError, SparkJobError, SparkJobCancelledError)):
        return exc
    if not is_spark_error(exc):
        return exc  # the user's own exception, as raised by fn
    text = str(exc)
    error_class = None
    getter = getattr(exc, "getCondition", None) or getattr(exc, "getErrorClass", None)
    if getter is not None:
        try:
            error_class = getter()
        except Exception:
            error_class = None
    head = first_line(exc)
    if any(marker in text for marker in CANCELLED_MARKERS[:2]) or (
        op.cancel_reason is not None and any(m in text for m in CANCELLED_MARKERS)
    ):
        return SparkJobCancelledError(f"Spark job {op.id} was cancelled: {head[:500]}", op.id)
    op.error_class = error_class
    return SparkJobError(f"{type(exc).__name__}: {head[:2000]}", error_class)
