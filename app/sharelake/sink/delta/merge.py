"""MERGE and DELETE against one Delta table: an upsert's conditional MERGE, and the DELETE that repairs duplicates.

Both run in the caller's thread, after every earlier commit's post-commit work (the table's
`Checkpointer`: `wait_idle`), through the table's writer session, with the table's writer lease
checked before and its commit lock held around the commit (`sharelake.sink.delta.commit_lock`). Delta's
MERGE and DELETE run their own transactions; a MERGE another writer's commit sent back runs again
on the newer snapshot (a conditional MERGE repeated changes nothing it already changed). A MERGE's
commit is a commit of the table like an append's: its proof is minted here once it is durable and
read back (`DeltaWriter.read_back`: the commit file holds this MERGE's metadata), and the writer's
after-commit work (catalog entry, checkpoint) follows it. An upsert of keys the table lacks is
the writer's append instead, checked in its transaction (`merge`'s `new_keys`).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from sharelake.acknowledge.proof import CommitProof
from sharelake.failures import faults
from sharelake.sink.delta.checkpointer import Checkpointer
from sharelake.sink.delta.commit_lock import CommitLock
from sharelake.sink.delta.writer import (
    COMMIT_ATTEMPTS,
    CONFLICTS,
    USER_METADATA_CONF,
    Claim,
    CommitCounts,
    DeltaWriter,
    KeyProbe,
    KeysHeld,
)
from sharelake.table.layout import GENERATION_EXPRESSION
from sharelake.table.location import TableLocation

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MergeRows:
    """What a MERGE applies: `source` (aliased `s`) into the table (`t`), a row matched `on`
    replaced when `when_newer` holds, an unmatched one inserted; `merge_schema`: the columns
    `source` adds are added to the table."""

    source: DataFrame
    on: Column
    when_newer: Column
    merge_schema: bool = False


class DeltaMerge:
    """MERGEs and DELETEs of one table, beside its `DeltaWriter` (which makes its first commit)."""

    def __init__(
        self,
        session: SparkSession,
        location: TableLocation,
        name: str,
        writer: DeltaWriter,
        checkpointer: Checkpointer,
        commit_lock: CommitLock,
        stats: CommitCounts,
        before_commit: Callable[[], None] | None = None,
    ):
        """The table's writer session, writer, checkpointer, commit lock and counters, as its writer
        has them; `name` names the fault points (those of the writer's appends); `before_commit`:
        the writer lease's check."""
        self._session = session
        self._table_path = location.path
        self._name = name
        self._writer = writer
        self._checkpointer = checkpointer
        self._commit_lock = commit_lock
        self._stats = stats
        self._before_commit = before_commit
        # the table's last upsert found none of its keys in the table: the next one tries an append
        # (None until the first: then read from the table's latest commit, `_keys_new_before`)
        self._keys_new: bool | None = None
        self._created_with: KeyProbe | None = None  # the keys of the commit that created the table, until the next

    def merge(
        self,
        rows: MergeRows,
        user_metadata: str,
        batch_id: int,
        claim: Claim | None = None,
        new_keys: KeyProbe | None = None,
    ) -> CommitProof | None:
        """MERGE `rows` into the table: one commit, its proof once it is durable.

        Keys the table does not hold yet need no MERGE: while the table's last upsert found none of
        its keys in the table (at start: its latest commit says; after creating it: the keys it was
        created with), `rows.source` is appended (`DeltaWriter.append`, with `claim`) in a transaction
        that finds none of `new_keys` in its snapshot's rows, the check and the commit atomic
        together as an append's claim; if the snapshot holds one of them (`KeysHeld`: nothing was
        written) the MERGE follows, and so do the next upserts' until one MERGE inserts every key
        it got.

        Synchronous (in the caller's thread, after every earlier commit's post-commit work): Delta's
        MERGE runs its own transaction, which conflicts with any commit that added or removed files
        it read after it began; it then runs again on the newer snapshot (a conditional MERGE
        repeated changes nothing it already changed). The table's first commit is a plain append
        of `rows.source` (two creators conflict in Delta). None when Delta recorded no commit.
        """
        faults.hit(f"before_{self._name}_merge")  # an upserted table's write, the table's first append included
        self._checkpointer.wait_idle()
        if not self._writer.exists():
            self._created_with = new_keys
            return self._writer.append(rows.source, user_metadata, batch_id, rows.merge_schema)
        if self._created_with is not None and new_keys is not None:  # the table holds the created keys
            self._keys_new = not new_keys.among(self._created_with)
        elif self._keys_new is None:
            self._keys_new = self._keys_new_before()
        self._created_with = None
        if new_keys is not None and self._keys_new and claim is not None:
            checked = replace(claim, keys=new_keys)  # the append's claim, with the keys the table must lack
            try:
                proof = self._writer.append(rows.source, user_metadata, batch_id, rows.merge_schema, checked)
            except KeysHeld:
                self._keys_new = False
            else:
                self._stats.key_appends += 1
                return proof
        return self._merged(rows, user_metadata, batch_id, new_keys)

    def _merged(
        self, rows: MergeRows, user_metadata: str, batch_id: int, new_keys: KeyProbe | None
    ) -> CommitProof | None:
        """`merge`'s MERGE, retried on another writer's commit; whether it inserted every key noted."""
        if self._before_commit is not None:
            self._before_commit()
        faults.hit(f"before_{self._name}_commit")
        self._writer.prepare_schema(rows.source.schema, rows.merge_schema)
        source = self._with_table_columns(rows.source)
        before = self._writer.last_commit()
        self._session.sparkContext.setLocalProperty(
            "spark.job.description", f"sharelake {self._name} merge, batch = {batch_id}"
        )
        self._session.conf.set(USER_METADATA_CONF, user_metadata)
        try:
            for attempt in range(1, COMMIT_ATTEMPTS + 1):
                if self._before_commit is not None and attempt > 1:
                    self._before_commit()
                target = DeltaTable.forPath(self._session, self._table_path).alias("t")
                try:
                    with self._commit_lock():
                        merged = (
                            target.merge(source.alias("s"), rows.on)
                            .whenMatchedUpdateAll(rows.when_newer)
                            .whenNotMatchedInsertAll()
                            .execute()
                        )
                    break
                except CONFLICTS:
                    if attempt == COMMIT_ATTEMPTS:
                        raise
                    self._stats.commit_conflicts += 1
                    log.info(
                        "%s: another writer committed first (attempt %d): merging again", self._table_path, attempt
                    )
                    time.sleep(random.uniform(0.0, 0.05 * attempt))
        finally:
            self._session.conf.unset(USER_METADATA_CONF)
        if new_keys is not None:  # Delta's metrics of the MERGE: a row, made in the driver
            inserted = merged.first()
            self._keys_new = inserted is not None and inserted["num_inserted_rows"] == new_keys.count
        version = self._writer.last_commit()
        if version is None or version == before:
            return None
        self._writer.after_commit()
        faults.hit(f"after_{self._name}_commit")
        self._writer.read_back(version, user_metadata)
        return CommitProof._mint(self._table_path, version)

    def _keys_new_before(self) -> bool:
        """Whether the table's latest commit (an earlier run's, say) found none of its keys in the table:
        any commit but a MERGE, or a MERGE that inserted every row of its source. Read once a run,
        from Delta's history of one commit (one small Spark job)."""
        latest = DeltaTable.forPath(self._session, self._table_path).history(1).first()
        if latest is None or latest["operation"] != "MERGE":
            return True
        metrics = latest["operationMetrics"] or {}
        return bool(metrics.get("numTargetRowsInserted") == metrics.get("numSourceRows"))

    def _with_table_columns(self, frame: DataFrame) -> DataFrame:
        """`frame` with the table's columns it lacks, as typed nulls: a MERGE's `UPDATE SET *` and
        `INSERT *` name every column of the table (an append leaves a missing one null by itself),
        e.g. a field an earlier payload schema had. Generated columns are Delta's to fill. Read from
        the latest snapshot each time: another writer may have added a column."""
        table = self._writer.table_schema()
        have = {c.lower() for c in frame.columns}
        missing = [f for f in table.fields if f.name.lower() not in have and GENERATION_EXPRESSION not in f.metadata]
        return frame.withColumns({f.name: F.lit(None).cast(f.dataType) for f in missing}) if missing else frame

    def delete(self, condition: str, user_metadata: str) -> int:
        """DELETE FROM the table WHERE `condition`, with `user_metadata` on its commit; rows deleted."""
        self._checkpointer.wait_idle()
        if self._before_commit is not None:
            self._before_commit()
        path = self._table_path.replace("`", "``")
        self._session.conf.set(USER_METADATA_CONF, user_metadata)
        try:
            with self._commit_lock():
                deleted = self._session.sql(f"DELETE FROM delta.`{path}` WHERE {condition}").collect()
        finally:
            self._session.conf.unset(USER_METADATA_CONF)
        return int(deleted[0][0]) if deleted and deleted[0][0] is not None else 0
