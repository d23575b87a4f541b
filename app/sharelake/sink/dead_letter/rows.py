"""The dead-letter table's row layout: each record that cannot land, raw, with why and when.

`DEAD_LETTER_SCHEMA` is the record's columns as the members built them (`RECORD_SCHEMA`), then the error class and
message, when the record was seen, the job and batch that parked it, and its replay. One row per record,
deduplicated by (topic, partition, offset) like the main table (appended through a `DedupTable`). `last_seen` is
the time of the write (and the stamp its duplicate repair keys on, `STAMP_COLUMN`); `first_seen` is when this job
first saw the record, which is earlier when a failed attempt RELEASEd it before (deliveries to other processes
are not known); `replayed_at` / `replayed_to` stay null until the replay job sets them. Delta keeps file
statistics on every column but the raw key, value and headers and the message (`STATS_COLUMNS`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import pyarrow as pa

from sharelake.bridge.arrow_rows import RECORD_SCHEMA
from sharelake.formats.base import BadRecord

DEAD_LETTER_SCHEMA = pa.schema(
    [
        *RECORD_SCHEMA,  # the record, raw, as in the main table
        pa.field("error_class", pa.string(), nullable=False),
        pa.field("error_message", pa.string()),
        pa.field("first_seen", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("last_seen", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("job", pa.string(), nullable=False),
        pa.field("batch_id", pa.int64(), nullable=False),
        pa.field("replayed_at", pa.timestamp("us", tz="UTC")),
        pa.field("replayed_to", pa.string()),
    ]
)
STAMP_COLUMN = "last_seen"
# the columns Delta keeps file statistics on: not the raw key, value, headers or the long message
STATS_COLUMNS = tuple(f.name for f in DEAD_LETTER_SCHEMA if f.name not in ("key", "value", "headers", "error_message"))


def dead_letter_rows(
    records: pa.Table,
    verdicts: Sequence[BadRecord],
    first_seen: Sequence[datetime],
    written_at: datetime,
    job: str,
    batch_id: int,
) -> pa.Table:
    """The dead-letter rows of `records` (rows of `arrow_rows.RECORD_SCHEMA`, as the members built them)."""
    n = records.num_rows
    columns = {name: records.column(name) for name in records.column_names}
    columns |= {
        "error_class": pa.array([v.error_class for v in verdicts], pa.string()),
        "error_message": pa.array([v.message for v in verdicts], pa.string()),
        "first_seen": pa.array(first_seen, pa.timestamp("us", tz="UTC")),
        "last_seen": pa.array([written_at] * n, pa.timestamp("us", tz="UTC")),
        "job": pa.array([job] * n, pa.string()),
        "batch_id": pa.array([batch_id] * n, pa.int64()),
        "replayed_at": pa.nulls(n, pa.timestamp("us", tz="UTC")),
        "replayed_to": pa.nulls(n, pa.string()),
    }
    return pa.Table.from_arrays([columns[f.name] for f in DEAD_LETTER_SCHEMA], schema=DEAD_LETTER_SCHEMA)
