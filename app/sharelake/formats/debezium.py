"""Debezium's change-event envelope (`payload.envelope = "debezium"`): its shape, and the row it carries.

A Debezium event is `{before, after, op, source, ts_ms, ...}`; its JSON converter with schemas on
wraps it as `{schema, payload}`. The value formats read the event's fields into columns (`json`
builds the event's schema from the row's, `debezium_event`; `avro` and the other registry formats
get them from the writer schema), and the upsert mode (`sharelake.sink.write.upsert`) takes the row out of
them (`event_row`): `c` (insert), `r` (snapshot read) and `u` (update) carry the new row in
`after`; `d` (delete) carries the old row, with its key, in `before`. Other ops (`t` truncate,
`m` message) carry no row of the table.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

BEFORE, AFTER, OP = "before", "after", "op"
EVENT_FIELDS = (BEFORE, AFTER, OP)  # the fields the row is taken from
PAYLOAD = "payload"  # the JSON converter's wrapper (schemas.enable = true)
ROW_OPS = ("c", "r", "u", "d")
DELETE = "d"


def debezium_event(row: StructType) -> StructType:
    """The JSON schema of an event of `row`s, plain or wrapped in `payload`."""
    event = StructType(
        [StructField(BEFORE, row, True), StructField(AFTER, row, True), StructField(OP, StringType(), True)]
    )
    return StructType([*event.fields, StructField(PAYLOAD, event, True)])


def event_row() -> tuple[Column, Column]:
    """Over an event's columns (`before`, `after`, `op`): the row it carries (a struct), and
    whether the event deletes it."""
    op = F.col(OP)
    return F.when(op == DELETE, F.col(BEFORE)).otherwise(F.col(AFTER)), op == DELETE


def no_row_of(op: Column) -> Column:
    """Whether an event of this op carries no row of the table (`t`, `m`, ...)."""
    return ~op.isin(*ROW_OPS)
