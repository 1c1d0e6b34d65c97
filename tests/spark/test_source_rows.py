"""The source's rows (``RowBuilder``) in this process: Arrow record batches of full size,
each row with its own container's stream, sequence and time, its index, and its event."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyspark.sql.types import (
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from orleanspy.spark.datasource import rows as rows_module
from orleanspy.spark.datasource.rows import RowBuilder
from orleanspy.streams.adapters.container import BatchContainer
from orleanspy.streams.ids import StreamId
from orleanspy.streams.tokens import SequenceToken

DEFAULT = StructType([
    StructField("namespace", StringType()), StructField("key", StringType()),
    StructField("sequence", LongType()), StructField("index", IntegerType()),
    StructField("time", TimestampType()), StructField("event", StringType()),
])


def containers() -> list[BatchContainer]:
    """Containers of 3, 0, 5, 1 and 4 events on two streams, at distinct times."""
    out = []
    for seq, size in enumerate((3, 0, 5, 1, 4)):
        sid = StreamId("ns", f"k{seq % 2}")
        events = tuple({"seq": seq, "i": i} for i in range(size))
        out.append(BatchContainer(sid, SequenceToken(seq), events, 1, 1_700_000_000.5 + seq))
    return out


def built(builder: RowBuilder) -> list[dict[str, Any]]:
    batches = [b for c in containers() for b in builder.add(c)]
    if builder.pending:
        batches.append(builder.flush())
    assert all(b.schema == builder.arrow for b in batches)
    return [row for b in batches for row in b.to_pylist()]


def test_rows_carry_their_containers_columns_across_batch_boundaries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(rows_module, "BATCH_ROWS", 4)  # batches end inside containers' runs
    rows = built(RowBuilder(DEFAULT))
    assert len(rows) == 13
    for row in rows:
        event = json.loads(row["event"])
        assert row["sequence"] == event["seq"] and row["index"] == event["i"]
        assert row["key"] == f"k{event['seq'] % 2}" and row["namespace"] == "ns"
        assert row["time"].timestamp() == 1_700_000_000.5 + event["seq"]


def test_a_schema_of_ones_own_takes_fields_and_keeps_the_metadata_it_names() -> None:
    schema = StructType([StructField("sequence", LongType()), StructField("i", LongType()),
                         StructField("missing", StringType())])
    rows = built(RowBuilder(schema))
    assert [(r["sequence"], r["i"], r["missing"]) for r in rows] == [
        (seq, i, None) for seq, size in enumerate((3, 0, 5, 1, 4)) for i in range(size)]
