"""Events as Spark rows: the columns of the source's schema, built as Arrow record batches.

The default schema (``DEFAULT_SCHEMA``): ``namespace``, ``key`` (the stream key as text),
``sequence`` and ``index`` (the event's token), ``time`` (when its container was enqueued,
UTC) and ``event``, the event as JSON text (msgpack-decoded, then JSON-encoded; bytes and
other non-JSON values become their ``str``). With a schema of your own
(``spark.readStream.schema("...")``), the columns named like the default ones carry the
same values and every other column is the event's field of that name (events must then be
maps; a missing field is null).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from itertools import repeat
from json import encoder as _encoder
from typing import Any, Final

from orleanspy.streams.adapters.base import BatchContainer

__all__ = ["DEFAULT_SCHEMA", "METADATA", "RowBuilder"]

DEFAULT_SCHEMA: Final = ("namespace STRING, key STRING, sequence BIGINT, `index` INT, "
                         "time TIMESTAMP, event STRING")
#: the columns that describe an event rather than come from it
METADATA: Final = frozenset({"namespace", "key", "sequence", "index", "time"})
#: rows per Arrow record batch handed to Spark
BATCH_ROWS: Final = 8192


def _json_encoder() -> Callable[[Iterable[Any]], Iterator[str | bytes]]:
    """Each value as compact JSON, non-JSON values as their ``str``: orjson when installed
    (the ``spark`` extra brings it; about five times faster), else the json module's C
    encoder, made once (``json.dumps`` builds an encoder per call, which would be most of the
    source's time; msgpack-decoded values hold no cycles, so no cycle check). orjson's UTF-8
    bytes go into the Arrow string column as they are; its arguments go positionally (keyword
    arguments, or a ``partial`` that holds them, cost as much again per event)."""
    try:
        import orjson
    except ImportError:
        pass
    else:
        dumps, option = orjson.dumps, orjson.OPT_NON_STR_KEYS
        return lambda values: map(dumps, values, repeat(str), repeat(option))
    make = getattr(_encoder, "c_make_encoder", None)
    if make is None:
        encode = json.JSONEncoder(separators=(",", ":"), default=str,
                                  ensure_ascii=False).encode
        return lambda values: map(encode, values)
    chunks = make(None, str, _encoder.encode_basestring, None, ":", ",", False, False, True)
    join = "".join
    return lambda values: (join(chunks(value, 0)) for value in values)


_json_each: Final = _json_encoder()


class RowBuilder:
    """Turns containers into Arrow record batches of one schema (``spark_schema``).

    The columns that describe a container (namespace, key, sequence, time) are kept once
    per container and repeated per event when a batch is built (Arrow ``take``), and the
    ``index`` column is computed there too: per event, only the events' own columns cost
    Python work."""

    def __init__(self, spark_schema: Any) -> None:
        import numpy as np
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        self._pa, self._np = pa, np
        self.names: list[str] = list(spark_schema.fieldNames())
        self.arrow = to_arrow_schema(spark_schema, timezone="UTC")
        self._default = self.names == ["namespace", "key", "sequence", "index", "time",
                                       "event"]
        self._fields = [n for n in self.names if n not in METADATA]
        self._meta = [n for n in ("namespace", "key", "sequence", "time") if n in self.names]
        self._reset()

    def _reset(self) -> None:
        #: per container: its namespace, key, sequence and time (those in the schema)
        self._per_container: dict[str, list[Any]] = {n: [] for n in self._meta}
        self._counts: list[int] = []
        #: per event: the columns that come from the events
        self._columns: dict[str, list[Any]] = {n: [] for n in self._fields}
        self._rows = 0

    def add(self, container: BatchContainer) -> Iterator[Any]:
        """Add the events of ``container``; yields a record batch whenever one is full."""
        sid, count = container.stream_id, container.count
        events = container.values()
        meta = self._per_container
        if "namespace" in meta:
            meta["namespace"].append(sid.namespace)
        if "key" in meta:
            meta["key"].append(str(sid.key))
        if "sequence" in meta:
            meta["sequence"].append(container.token.sequence)
        if "time" in meta:
            meta["time"].append(int(container.enqueued_at * 1e6))
        self._counts.append(count)
        cols = self._columns
        if self._default:
            cols["event"].extend(_json_each(events))
        else:
            for name in self._fields:
                cols[name].extend(e.get(name) if isinstance(e, dict) else None
                                  for e in events)
        self._rows += count
        if self._rows >= BATCH_ROWS:
            yield self.flush()

    def flush(self) -> Any:
        """The rows added since the last batch, as one record batch."""
        pa, np = self._pa, self._np
        counts = np.array(self._counts, dtype=np.int64)
        owner = np.repeat(np.arange(len(counts)), counts)  # each event's container
        arrays = []
        for name, field in zip(self.names, self.arrow, strict=True):
            if name in self._per_container:
                arrays.append(pa.array(self._per_container[name], type=field.type).take(owner))
            elif name == "index":
                first = np.cumsum(counts) - counts  # each container's first row
                arrays.append(pa.array(np.arange(len(owner)) - first[owner]).cast(field.type))
            else:
                arrays.append(pa.array(self._columns[name], type=field.type))
        self._reset()
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow)

    @property
    def pending(self) -> int:
        return self._rows
