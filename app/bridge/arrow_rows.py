"""The row layout, declared once, and polled Kafka records -> Arrow rows in that layout.

`RECORD_SCHEMA` is a Kafka record as a row (the identity, key, value, headers, timestamp and
delivery count); `ROW_SCHEMA` adds what the write stamps on it (`ingested_at`, `batch_id`). The
main table's metadata columns (`app.sink.formats.base`) and the dead-letter table's record columns
(`app.sink.dead_letter`) are derived from these.

`poll_rows` is called by each group member (`app.consume.member`) right after its poll, in
the member's own thread, so the Arrow build of the next batch runs while the current one writes;
the Delta sink only concatenates the polls' tables and stamps them (`stamped`). Columns are built
as whole lists and handed to Arrow in one go (no per-row Python objects reach Spark).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
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
WRITE_FIELDS = (
    pa.field("ingested_at", pa.timestamp("us", tz="UTC"), nullable=False),  # the write's stamp, one per append
    pa.field("batch_id", pa.int64(), nullable=False),  # the Spark micro-batch id
)
ROW_SCHEMA = pa.schema([*RECORD_SCHEMA, *WRITE_FIELDS])


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


def stamped(records: pa.Table, batch_id: int, ingested_at: datetime) -> pa.Table:
    """`records` (RECORD_SCHEMA, plus any extra columns after them) with the write's columns: ROW_SCHEMA."""
    n = records.num_rows
    extra = [f for f in records.schema if f.name not in RECORD_SCHEMA.names]
    stamp = pa.array([ingested_at], WRITE_FIELDS[0].type)
    columns = [
        *(records.column(name) for name in RECORD_SCHEMA.names),
        pa.repeat(stamp[0], n) if n else pa.array([], WRITE_FIELDS[0].type),
        pa.repeat(pa.scalar(batch_id, pa.int64()), n) if n else pa.array([], pa.int64()),
        *(records.column(f.name) for f in extra),
    ]
    return pa.Table.from_arrays(columns, schema=pa.schema([*ROW_SCHEMA, *extra]))
