"""to_plain(): a Spark job's result as msgpack-friendly data, built on the worker thread.

Rows become dicts, pandas DataFrames and Arrow tables become lists of row dicts, numpy
scalars and arrays become Python numbers and lists. Everything else passes through (the
codec rejects what it cannot carry, naming the type).
"""

from __future__ import annotations

import datetime as _dt
import decimal
from collections.abc import Mapping
from typing import Any

__all__ = ["to_plain"]

_SCALARS = (str, int, float, bool, bytes, type(None), _dt.datetime, _dt.date, _dt.time,
            _dt.timedelta, decimal.Decimal)


def to_plain(value: Any) -> Any:
    """Convert a job result into plain data (recursively)."""
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, dict):
        return {_key(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_plain(v) for v in value]
    module = type(value).__module__
    if module.startswith("pyspark") and hasattr(value, "asDict"):  # pyspark Row
        return {k: to_plain(v) for k, v in value.asDict(recursive=True).items()}
    if isinstance(value, tuple):
        return tuple(to_plain(v) for v in value)
    if module.startswith("pandas"):
        if hasattr(value, "to_dict") and hasattr(value, "columns"):  # DataFrame
            return [to_plain(r) for r in value.to_dict(orient="records")]
        if hasattr(value, "to_list"):  # Series, Index
            return [to_plain(v) for v in value.to_list()]
        if hasattr(value, "to_pydatetime"):  # Timestamp
            return value.to_pydatetime()
        if type(value).__name__ in ("NaTType", "NAType"):
            return None
    if module.startswith("pyarrow"):
        if hasattr(value, "to_pylist"):  # Table, RecordBatch, Array, ChunkedArray
            return to_plain(value.to_pylist())
        if hasattr(value, "as_py"):  # Scalar
            return to_plain(value.as_py())
    if module == "numpy" and hasattr(value, "tolist"):  # ndarray and numpy scalars
        return to_plain(value.tolist())
    if isinstance(value, (set, frozenset)):
        return type(value)(to_plain(v) for v in value)
    if isinstance(value, Mapping):
        return {_key(k): to_plain(v) for k, v in value.items()}
    return value


def _key(key: Any) -> Any:
    plain = to_plain(key)
    return plain if isinstance(plain, (str, int, bytes)) else str(plain)
