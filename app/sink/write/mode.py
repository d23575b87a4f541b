"""How a main table takes its records (`write.mode`): the seam, and its default, the append.

A `WriteMode` is built once per destination by `write_mode` (called by
`app.sink.write.destinations.open_destinations`, from the route's `WriteConfig`) and used by the table's
writer (`app.sink.write.table_writer.TableWriter`) for each micro-batch: `check` at start (one line, exit 2,
when the table was made in another mode), then `write` with the rows the parse kept. The modes:

- `Append` (here, the default): every record is a row, one append per batch (`DedupTable.append`);
- `Upsert` (`app.sink.write.upsert`): one row per key, a conditional MERGE per batch.

`write` returns what the commit holds and the rows the mode itself left out, with their class
(`ModeWrite`); the table writer decides the records from it as from any write.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import datetime

from pyspark.sql import DataFrame, SparkSession

from app.failures.errors import ConfigError
from app.formats.base import BadRecord, BatchRead, PayloadFormat
from app.formats.shape import table_schema
from app.sink.dedup.dedup_table import Appended, DedupTable
from app.sink.dedup.offset_ranges import BatchOffsets
from app.sink.delta.frames import FrameBuilder
from app.table.location import TableLocation

DELETED = "__deleted"  # an upserted table's flag of a key deleted by a tombstone (app.sink.write.upsert)


@dataclass
class ModeWrite:
    """What a mode's write did: its commit (None: none was made), the rows it left out (by row of
    the batch's candidates, with their class), what it counted."""

    appended: Appended | None
    bad: dict[int, BadRecord] = field(default_factory=dict)
    superseded: int = 0  # records replaced by a newer one of their key in the same batch
    split_keys: int = 0  # keys whose records in the batch came from more than one partition


@dataclass(frozen=True)
class Batch:
    """One write's inputs: the rows the parse kept (with the candidates' row numbers in `row`), how
    they were read, the offsets the commit claims, the batch's id, stamp and schema rule, and the
    builder of the table's frames (a mode that writes a frame of its own, on the table's session)."""

    kept: DataFrame
    read: BatchRead
    row: str
    claim: BatchOffsets
    batch_id: int
    stamp: datetime
    merge_schema: bool
    frames: FrameBuilder


class WriteMode(ABC):
    name: str
    error_classes: tuple[str, ...] = ()  # the dead-letter classes of the rows it leaves out
    # whether its batches' cost grows enough to need splitting within the record lock (app.sink.batch.budget)
    splits_batches: bool = False

    def check(self, spark: SparkSession, location: TableLocation, fmt: PayloadFormat) -> None:
        """At start: ConfigError (one line) when the table cannot be written in this mode."""
        schema = table_schema(spark, location)
        if schema is not None and DELETED in schema.names:
            raise ConfigError(
                f"{location} is an upserted table (it has a {DELETED} column), but write.mode = {self.name!r}: "
                'set write.mode = "upsert" with its write.keys, or write to a new table'
            )

    @abstractmethod
    def write(self, table: DedupTable, batch: Batch) -> ModeWrite:
        """Commit `batch.kept` to `table` (may raise `ClaimHeld`, having committed nothing)."""


class Append(WriteMode):
    name = "append"

    def write(self, table: DedupTable, batch: Batch) -> ModeWrite:
        rows = batch.read.main_rows(batch.kept)
        return ModeWrite(table.append(rows, batch.claim, batch.batch_id, batch.stamp, merge_schema=batch.merge_schema))
