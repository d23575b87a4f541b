"""A polled record's row layout, declared once, and polled Kafka records -> Arrow rows in that layout.

`RECORD_SCHEMA` is a Kafka record as a row (the identity, key, value, headers, timestamp and delivery count); the
columns a write adds (`ingested_at`, `batch_id`) and their stamping are `sharelake.table.columns`'s. `poll_rows` builds
one poll's rows, in poll order, from the parts of a `confluent_kafka.Message` that become a row (`PolledRecord`),
so each poll can carry its rows from the thread that polled it: the Arrow build of the next batch runs while the
current one writes. Columns are built as whole lists and handed to Arrow in one go (no per-row Python objects
reach Spark).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import pyarrow as pa

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])

RECORD_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", pa.list_(HEADER_TYPE)),
        pa.field("kafka_timestamp", pa.timestamp("ms", tz="UTC")),
        pa.field("delivery_count", pa.int32()),
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


def poll_rows(records: Sequence[PolledRecord]) -> pa.Table:
    """One poll's records as rows of RECORD_SCHEMA, in poll order."""
    columns = [
        pa.array([r.topic() for r in records], pa.string()),
        pa.array([r.partition() for r in records], pa.int32()),
        pa.array([r.offset() for r in records], pa.int64()),
        pa.array([r.key() for r in records], pa.binary()),
        pa.array([r.value() for r in records], pa.binary()),
        pa.array([_headers(r) for r in records], pa.list_(HEADER_TYPE)),
        pa.array([_timestamp_ms(r) for r in records], pa.timestamp("ms", tz="UTC")),
        pa.array([r.delivery_count() for r in records], pa.int32()),
    ]
    return pa.Table.from_arrays(columns, schema=RECORD_SCHEMA)
