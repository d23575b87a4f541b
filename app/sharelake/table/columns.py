"""The columns a write adds to a polled record's row, and the stamping that adds them.

`ROW_SCHEMA` is a Kafka record's row (`sharelake.bridge.arrow_rows.RECORD_SCHEMA`) plus what the write stamps on it:
`ingested_at` (the write's stamp, one value per append, that the dedup table's repair keys on) and `batch_id`
(the Spark micro-batch id). `stamped` adds them to the rows of one append, after the record's columns and before
any other column the rows carry. Only a write stamps them: a polled record's row never carries them.
"""

from __future__ import annotations

from datetime import datetime

import pyarrow as pa

from sharelake.bridge.arrow_rows import RECORD_SCHEMA

WRITE_FIELDS = (
    pa.field("ingested_at", pa.timestamp("us", tz="UTC"), nullable=False),  # the write's stamp, one per append
    pa.field("batch_id", pa.int64(), nullable=False),  # the Spark micro-batch id
)
ROW_SCHEMA = pa.schema([*RECORD_SCHEMA, *WRITE_FIELDS])


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
