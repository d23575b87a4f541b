"""`write.mode = "upsert"`: one row per key, the version of the record with the highest (partition, offset).

A `WriteMode` (`sharelake.sink.write.write_mode`) of its own: its keys from `[write]` (or a routed topic's
`[topics.<name>.write]`, `Upsert.of_route`); its reserved column, `__deleted` (a table without it
was written by appends, one with it is refused by the other modes, `Upsert.refusal`); its commits
MERGEs by key (`merges_by_key`); its counters (`upsert_superseded`, `upsert_split_keys`); the
envelopes it takes (`envelopes`: Debezium's change events too, which only a mode merging by key can
apply) and its banner note (`note`: the keys it upserts by).
`docs/upserts.md` is the user's account. A batch's write:

1. the rows the parse kept, as the main table's columns; with `delete_on_tombstone`, a record without
   a value is a tombstone: its row is flagged `__deleted`, its payload columns null and its key
   columns read from the record key (`tombstone_key`);
2. a row whose key columns are null is left out and dead-lettered as `missing_key` (collected by an
   observation of the same Spark job);
3. per key, the newest record of the batch (`max_by` over `(partition, offset)`): the batch's
   source, brought to the driver as Arrow (the observations are read from this job, and the MERGE
   gets a source that is computed once), with how many records it superseded and how many keys came
   from several partitions;
4. one conditional MERGE (`DedupTable.merge`): a row matched on the keys is replaced only by a
   newer record, an unmatched key is inserted (a tombstone too: the flagged row remembers the
   delete, so a late older record cannot bring the key back). The target is pruned to the
   batch's key range (each key column's min and max, `sharelake.sink.write.key_probe`), which
   skips files when the table is clustered or sorted by key. Or, when the table holds none of the
   batch's keys (`NewKeys`, asked in the append's transaction: `DeltaMerge.merge`), the same rows
   appended: what the MERGE would have inserted.

Why it is exactly once: the table's row of a key is always its record with the highest
(partition, offset) applied so far, whatever order the records come in, and applying a record
again (a redelivery, a retried MERGE, a second job's commit) changes nothing. The records of one
key must share a partition for that order to be the producer's; keys seen in several partitions
within a batch are counted (`upsert_split_keys`) and logged.
"""

from __future__ import annotations

import functools
import logging
import operator
from collections.abc import Sequence
from typing import Any, Self

import pyarrow as pa
from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, DataType, StringType, StructType

from sharelake.config.routes import Route
from sharelake.failures.errors import ConfigError
from sharelake.formats.base import METADATA_COLUMNS, BadRecord, PayloadFormat, pc
from sharelake.formats.debezium import AFTER, EVENT_FIELDS, OP, event_row, no_row_of
from sharelake.sink.dedup.dedup_table import DedupTable
from sharelake.sink.delta.merge import MergeRows
from sharelake.sink.write.key_probe import NewKeys, key_ranges, within
from sharelake.sink.write.write_mode import Batch, ModeWrite, WriteMode
from sharelake.table.location import TableLocation

log = logging.getLogger(__name__)

DELETED = "__deleted"  # an upserted table's flag of a key deleted by a tombstone: its reserved column
KEY = "key"  # the record key's column (sharelake.formats.keys)
_ERROR = "_upsert_error"  # a row's dead-letter class, set by this mode
_OP = "_op"  # a Debezium event's op
_NEWEST = "_newest"
_VERSIONS = "_versions"  # records of the key in the batch
_SPLIT = "_split"  # the key's records came from more than one partition


class Upsert(WriteMode):
    name = "upsert"

    reserved_columns = (DELETED,)
    merges_by_key = True  # a record merged twice changed the table once: its table has nothing to repair
    counters = ("upsert_superseded", "upsert_split_keys")
    error_classes = ("missing_key", "unsupported_op")
    splits_batches = True  # a MERGE's cost grows with the batch and the table
    envelopes = ("none", "debezium")  # a change event is applied by its key

    def __init__(
        self,
        keys: tuple[str, ...],
        delete_on_tombstone: bool,
        key: str = "write",
        envelope: bool = False,
        others: Sequence[type[WriteMode]] = (),
    ):
        super().__init__(others)
        self.keys = keys
        self.envelope = envelope  # values are Debezium change events (sharelake.formats.debezium)
        self.deletes = delete_on_tombstone or envelope  # Debezium's tombstone follows its delete
        self.key = key  # the config section, for error lines
        self._newer = (F.col("s.partition") > F.col("t.partition")) | (
            (F.col("s.partition") == F.col("t.partition")) & (F.col("s.offset") > F.col("t.offset"))
        )

    @classmethod
    def of_route(cls, route: Route, others: Sequence[type[WriteMode]]) -> Self:
        """Its keys from the route's `write` section; its values are Debezium events when its payload says so."""
        settings = route.write
        debezium = route.payload.envelope == "debezium"
        return cls(tuple(settings.keys), settings.delete_on_tombstone, route.write_key, debezium, others)

    @classmethod
    def envelope_refusal(cls, envelope: str, section: str) -> str:
        return (
            f'payload.envelope = "{envelope}" upserts change events by key: set {section}.mode = "{cls.name}" and '
            f"{section}.keys (the table's key columns)"
        )

    def note(self) -> str:
        return f", upserted by {', '.join(self.keys)}"

    @classmethod
    def refusal(cls, location: TableLocation, column: str, mode: str) -> str:
        return (
            f"{location} is an upserted table (it has a {column} column), but write.mode = {mode!r}: "
            'set write.mode = "upsert" with its write.keys, or write to a new table'
        )

    def check_table(self, schema: StructType | None, location: TableLocation, fmt: PayloadFormat) -> None:
        if schema is not None and DELETED not in schema.names:
            raise ConfigError(
                f'{self.key}.mode = "upsert", but {location} was written by appends (it has no {DELETED} column): '
                'upsert into a new table, or keep write.mode = "append" for this one'
            )
        known = fmt.columns() or (tuple(schema.names) if schema is not None else None)
        unknown = [k for k in self.keys if known is not None and k not in known]
        if unknown:
            raise ConfigError(self._unknown(unknown[0], known or ()))

    def _unknown(self, name: str, columns: tuple[str, ...] | list[str]) -> str:
        shown = ", ".join(c for c in columns if c != DELETED)
        return f"{self.key}.keys names {name}, not a column of the table ({shown}): name the payload's key column(s)"

    def write(self, table: DedupTable, batch: Batch) -> ModeWrite:
        rows, no_row, columns = self._rows(batch)
        observed = Observation()
        newest = self._newest(self._flagged(rows, no_row, batch.row, observed), columns)
        source = newest.toArrow()  # the job: parse, observations, newest per key
        bad = {int(r[0]): self._bad(int(r[0]), r[1], r[2]) for r in observed.get["bad"]}
        counts = self._counted(source, table, batch.batch_id)
        if source.num_rows == 0:
            return ModeWrite(None, bad, counts)
        source = source.drop_columns([_VERSIONS, _SPLIT])
        frame = batch.frames.frame(source)
        ranges = key_ranges(source, self.keys)
        keys = NewKeys(source.select(list(self.keys)), batch.frames.frame, ranges)
        to_merge = MergeRows(frame, self._on(ranges), self._newer, batch.merge_schema)
        appended = table.merge(to_merge, batch.claim, batch.batch_id, batch.stamp, new_keys=keys)
        return ModeWrite(appended, bad, counts)

    def _rows(self, batch: Batch) -> tuple[DataFrame, Column, list[str]]:
        """The kept rows as the table's rows (deletes flagged, a tombstone's key columns from its record
        key), with the row numbers (and a Debezium event's op); whether a row is an op that carries no
        row of the table; and the table's columns among them."""
        kept = batch.kept.withColumn(DELETED, F.col("value").isNull() if self.deletes else F.lit(False))
        rows = batch.read.main_rows(kept, carry=(batch.row, DELETED))
        no_row = F.lit(False)  # a Debezium op that carries no row of the table
        if self.envelope:
            rows, no_row = self._unwrap(rows, batch.row)
        schema = rows.schema
        columns = [c for c in schema.names if c not in (batch.row, _OP)]
        unknown = [k for k in self.keys if k not in schema.names]
        if unknown:  # a format whose columns come from the registry: found at its first batch
            raise ConfigError(self._unknown(unknown[0], columns))
        if self.deletes:
            named = [k for k in self.keys if k != KEY]
            whole = len(named) == 1  # a text key can fill one key column, not several
            rows = rows.withColumns(
                {k: F.when(F.col(DELETED), tombstone_key(k, schema, whole)).otherwise(F.col(k)) for k in named}
            )
        return rows, no_row, columns

    def _flagged(self, rows: DataFrame, no_row: Column, row: str, observed: Observation) -> DataFrame:
        """`rows` with each one's dead-letter class (`_ERROR`: null for a row to merge); `observed`
        collects the flagged rows' (row number, class, Debezium op)."""
        missing = functools.reduce(operator.or_, (F.col(k).isNull() for k in self.keys))
        error = F.when(no_row, F.lit("unsupported_op")).when(missing, F.lit("missing_key"))
        return rows.withColumn(_ERROR, error).observe(
            observed,
            F.collect_list(
                F.when(F.col(_ERROR).isNotNull(), F.struct(row, _ERROR, _OP if self.envelope else F.lit(None)))
            ).alias("bad"),
        )

    def _newest(self, flagged: DataFrame, columns: list[str]) -> DataFrame:
        """Per key, the newest of the rows to merge (its `columns`), with how many records of the key
        the batch had (`_VERSIONS`) and whether they came from several partitions (`_SPLIT`)."""
        return (
            flagged.where(F.col(_ERROR).isNull())
            .groupBy(*self.keys)
            .agg(
                F.max_by(F.struct(*columns), F.struct("partition", "offset")).alias(_NEWEST),
                F.count(F.lit(1)).alias(_VERSIONS),
                (F.min("partition") != F.max("partition")).alias(_SPLIT),
            )
            .select(f"{_NEWEST}.*", _VERSIONS, _SPLIT)
        )

    def _counted(self, source: pa.Table, table: DedupTable, batch_id: int) -> dict[str, int]:
        """The batch's superseded records and split keys (`counters`); split keys are logged."""
        superseded = int(pc.sum(source.column(_VERSIONS)).as_py() or 0) - source.num_rows
        split = int(pc.sum(source.column(_SPLIT).cast(pa.int64())).as_py() or 0)
        if split:
            log.warning(
                "%s: %d keys had records from several partitions in batch %d: their order is by partition, "
                "then offset, not the producer's (docs/upserts.md)",
                table.table_path,
                split,
                batch_id,
            )
        return {"upsert_superseded": superseded, "upsert_split_keys": split}

    def _unwrap(self, rows: DataFrame, row: str) -> tuple[DataFrame, Column]:
        """A Debezium event's columns -> the row it carries (its fields as columns; a delete's are its
        key columns, the rest null, as a tombstone's), deletes flagged, the op kept (`_OP`); and
        whether the op carries no row."""
        missing = [f for f in EVENT_FIELDS if f not in rows.columns]
        if missing:
            raise ConfigError(
                f"payload.envelope = 'debezium', but the values have no {', '.join(missing)} field: they are not "
                "Debezium change events; set payload.envelope = 'none', or fix the topic"
            )
        fields = [f.name for f in rows.schema[AFTER].dataType.fields]
        carried, deletes = event_row()
        meta = [c for c in rows.columns if c in METADATA_COLUMNS]
        return (
            rows.select(
                *meta,
                *(carried[f].alias(f) if f in self.keys else F.when(~deletes, carried[f]).alias(f) for f in fields),
                F.col(row),
                (F.col(DELETED) | deletes).alias(DELETED),
                F.col(OP).alias(_OP),
            ),
            F.col(_OP).isNotNull() & no_row_of(F.col(_OP)),
        )

    def _bad(self, row: int, error_class: str, op: str | None) -> BadRecord:
        if error_class == "unsupported_op":
            return BadRecord(row, error_class, f"Debezium op {op!r} carries no row (c, r, u and d do)")
        return BadRecord(row, error_class, f"key column(s) null or absent: {', '.join(self.keys)}")

    def _on(self, ranges: dict[str, tuple[Any, Any]]) -> Column:
        """The keys matched, and the target pruned to each key column's range in the batch."""
        on = functools.reduce(operator.and_, (F.col(f"t.`{k}`") == F.col(f"s.`{k}`") for k in self.keys))
        return on & within(ranges, "t.")


def tombstone_key(name: str, schema: StructType, whole: bool) -> Column:
    """A tombstone's value of key column `name`, from its record key, cast to the column's type: the
    field of that name of a struct key (Avro keys); of a text (or raw) key, the field of that name
    when the key is a JSON object (as Debezium's JSON converter writes keys, plain or in `payload`),
    else (`whole`: the only key column) the whole key. Null otherwise: the record is `missing_key`."""
    key_type: DataType = schema[KEY].dataType
    target: Any = schema[name].dataType
    if isinstance(key_type, StructType):
        return F.col(KEY)[name].cast(target) if name in key_type.names else F.lit(None).cast(target)
    if isinstance(key_type, StringType | BinaryType):
        text = F.col(KEY).cast("string")
        found = [F.get_json_object(text, f"$.payload.{name}"), F.get_json_object(text, f"$.{name}")]
        return F.coalesce(*found, *([text] if whole else [])).cast(target)
    return F.lit(None).cast(target)
