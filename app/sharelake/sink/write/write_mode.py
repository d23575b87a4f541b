"""The write-mode seam (`write.mode`: how a main table takes its records).

A `WriteMode` commits the rows the parse kept of one micro-batch to its table (`write`: at most one
commit), and declares what the rest of the sink needs to know of it, so that no code outside the
mode's own module asks which mode it is:

- `name`: its `write.mode` value; `of_route`: the mode, from its route's config;
- `reserved_columns`: the columns only a table made in this mode has. `check`, at start, refuses a
  table holding one of another mode's (`others`: the modes it is given when built; the line is that
  mode's `refusal`), then runs the mode's own check of the table (`check_table`);
- `merges_by_key`: its commits are MERGEs by key, so a record merged twice changed the table once
  and its dedup table has no duplicate rows to repair (`DedupTable`'s `upserted`);
- `counters`: the sink's counters (`sharelake.sink.batch.stats.SinkStats`) its writes add to: a write
  returns what it adds to each (`ModeWrite.counts`);
- `error_classes`: the dead-letter classes of the rows it leaves out; `splits_batches`: whether its
  batches' cost grows enough to need splitting within the record lock (`sharelake.sink.batch.budget`);
- `envelopes`: the payload envelopes (`payload.envelope`) whose values it takes; a route whose envelope
  its mode does not take is refused at start with the line of a mode that does (`envelope_refusal`);
- `note`: what the start's banner says of a table written in this mode (nothing, for the default).

`write` returns what the commit holds and the rows the mode itself left out, with their class
(`ModeWrite`); the table writer decides the records from it as from any write. The default, the
append, is `sharelake.sink.write.append`; the modes by name, and the one place a route's mode is
built: `sharelake.sink.write.mode_registry`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar, Self

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from sharelake.config.routes import Route
from sharelake.failures.errors import ConfigError
from sharelake.formats.base import BadRecord, BatchRead, PayloadFormat
from sharelake.formats.shape import table_schema
from sharelake.sink.dedup.dedup_table import Appended, DedupTable
from sharelake.sink.delta.frames import FrameBuilder
from sharelake.table.location import TableLocation
from sharelake.table.offset_ranges import BatchOffsets


@dataclass
class ModeWrite:
    """What a mode's write did: its commit (None: none was made), the rows it left out (by row of
    the batch's candidates, with their class), and what it adds to its counters (by name)."""

    appended: Appended | None
    bad: dict[int, BadRecord] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)  # of the mode's `counters`


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
    name: ClassVar[str]
    reserved_columns: ClassVar[tuple[str, ...]] = ()  # only a table made in this mode has them
    # its commits are MERGEs by key: a record merged twice changed the table once (nothing to repair)
    merges_by_key: ClassVar[bool] = False
    counters: ClassVar[tuple[str, ...]] = ()  # the SinkStats counters its writes add to (`ModeWrite.counts`)
    error_classes: ClassVar[tuple[str, ...]] = ()  # the dead-letter classes of the rows it leaves out
    # whether its batches' cost grows enough to need splitting within the record lock (sharelake.sink.batch.budget)
    splits_batches: ClassVar[bool] = False
    envelopes: ClassVar[tuple[str, ...]] = ("none",)  # the payload envelopes whose values it takes

    def __init__(self, others: Sequence[type[WriteMode]] = ()):
        self.others = tuple(others)  # the other modes: a table holding their reserved columns is refused

    @classmethod
    @abstractmethod
    def of_route(cls, route: Route, others: Sequence[type[WriteMode]]) -> Self:
        """The mode a route's config asks for (its `write` keys, and its payload's)."""

    @classmethod
    def refusal(cls, location: TableLocation, column: str, mode: str) -> str:
        """The line that refuses writing a table made in this mode (it has `column`) in `mode`."""
        return (
            f"{location} was written with write.mode = {cls.name!r} (it has a {column} column), but write.mode = "
            f"{mode!r}: set write.mode = {cls.name!r}, or write to a new table"
        )

    @classmethod
    def envelope_refusal(cls, envelope: str, section: str) -> str:
        """The line that sends a route whose payload has `envelope` (one this mode takes, another mode not)
        to this mode; `section`: the route's write section."""
        return f'payload.envelope = "{envelope}" needs {section}.mode = "{cls.name}"'

    def note(self) -> str:
        """What the start's banner adds to a destination written in this mode (after its table)."""
        return ""

    def check(self, spark: SparkSession, location: TableLocation, fmt: PayloadFormat) -> None:
        """At start: ConfigError (one line) when the table cannot be written in this mode: it was made
        in another (it holds that mode's reserved columns), or the mode's own check refuses it."""
        schema = table_schema(spark, location)
        names = () if schema is None else schema.names
        for other in self.others:
            theirs = [c for c in other.reserved_columns if c in names and c not in self.reserved_columns]
            if theirs:
                raise ConfigError(other.refusal(location, theirs[0], self.name))
        self.check_table(schema, location, fmt)

    def check_table(  # noqa: B027 - the append writes any table no other mode made
        self, schema: StructType | None, location: TableLocation, fmt: PayloadFormat
    ) -> None:
        """The mode's own start-up check of the table (`schema`: None while it does not exist)."""

    @abstractmethod
    def write(self, table: DedupTable, batch: Batch) -> ModeWrite:
        """Commit `batch.kept` to `table` (may raise `ClaimHeld`, having committed nothing)."""
