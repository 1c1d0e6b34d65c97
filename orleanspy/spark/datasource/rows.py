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
from collections.abc import Callable, Iterator
from functools import partial
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


def _json_encoder() -> Callable[[Any], str | bytes]:
    """Compact JSON, non-JSON values as their ``str``: orjson when installed (the ``spark``
    extra brings it; about five times faster), else the json module's C encoder, made once
    (``json.dumps`` builds an encoder per call, which would be most of the source's time;
    msgpack-decoded values hold no cycles, so no cycle check). orjson's UTF-8 bytes go into
    the Arrow string column as they are."""
    try:
        import orjson
    except ImportError:
        pass
    else:
        return partial(orjson.dumps, default=str, option=orjson.OPT_NON_STR_KEYS)
    make = getattr(_encoder, "c_make_encoder", None)
    if make is None:
        return json.JSONEncoder(separators=(",", ":"), default=str, ensure_ascii=False).encode
    chunks = make(None, str, _encoder.encode_basestring, None, ":", ",", False, False, True)
    join = "".join
    return lambda value: join(chunks(value, 0))


_json: Final = _json_encoder()


class RowBuilder:
    """Turns containers into Arrow record batches of one schema (``spark_schema``)."""

    def __init__(self, spark_schema: Any) -> None:
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        self._pa = pa
        self.names: list[str] = list(spark_schema.fieldNames())
        self.arrow = to_arrow_schema(spark_schema, timezone="UTC")
        self._default = self.names == ["namespace", "key", "sequence", "index", "time",
                                       "event"]
        self._fields = [n for n in self.names if n not in METADATA]
        self._columns: dict[str, list[Any]] = {n: [] for n in self.names}
        self._rows = 0

    def add(self, container: BatchContainer) -> Iterator[Any]:
        """Add the events of ``container``; yields a record batch whenever one is full."""
        cols = self._columns
        sid, seq, count = container.stream_id, container.token.sequence, container.count
        events = container.values()
        for name, value in (("namespace", sid.namespace), ("key", str(sid.key)),
                            ("sequence", seq), ("time", int(container.enqueued_at * 1e6))):
            if name in cols:
                cols[name].extend([value] * count)
        if "index" in cols:
            cols["index"].extend(range(count))
        if self._default:
            cols["event"].extend(map(_json, events))
        else:
            for name in self._fields:
                column = cols[name]
                column.extend(e.get(name) if isinstance(e, dict) else None for e in events)
        self._rows += count
        if self._rows >= BATCH_ROWS:
            yield self.flush()

    def flush(self) -> Any:
        """The rows added since the last batch, as one record batch."""
        pa = self._pa
        arrays = [pa.array(self._columns[name], type=field.type)
                  for name, field in zip(self.names, self.arrow, strict=True)]
        self._columns = {n: [] for n in self.names}
        self._rows = 0
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow)

    @property
    def pending(self) -> int:
        return self._rows
