"""Sharelake's commit metadata in a Delta table's log: its form, and the offsets the commits recorded, read back.

The metadata is written and parsed here only (`user_metadata_json`, `repair_metadata_json`,
`parse_user_metadata`). `DeltaCommitLog` reads it back; ways in, none of them a scan of the data files in the
common case:
- `recent(limit)`: the last `limit` commits through Delta's own history API (at start);
- `after(version, until)`: the commit files `_delta_log/<version>.json` after a known version, read
  one by one through the table's Hadoop FileSystem: other writers' commits (our own are known
  locally), checked with one `exists` per micro-batch;
- `written_offsets(commit)`: the offsets a *partial* commit really holds (see below), read from the
  table by the commit's write stamp: a data read, only for a partial commit the reader did not
  write itself (another job's, or ours after a restart), so rarely.

A Sharelake append's metadata claims every offset the append was given; the rows that Spark
finds unreadable in that same job (malformed JSON, ...) are filtered out of the write and parked
in the dead-letter table afterwards. Such a commit is *partial*: Delta's `numOutputRows` for it is
below the claim's offset count, and its true offsets are read back once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import pyarrow as pa
from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from sharelake.table.location import TableLocation
from sharelake.table.offset_ranges import BatchOffsets, OffsetRanges, PartitionKey

METADATA_KEY = "sharelake"


@dataclass(frozen=True)
class SharelakeCommit:
    """A Sharelake commit: an append claiming `ranges` (its rows all carry `ingested_at_us`), or a repair.

    A repair commit (`repair_of` set) deleted the rows of version `repair_of` at the offsets in
    `ranges` because an earlier commit already held them; it adds no offsets to the table.
    `rows_written` is Delta's `numOutputRows` for the commit, when the log has it.
    """

    version: int
    write_id: str | None
    ranges: Mapping[PartitionKey, OffsetRanges]
    ingested_at_us: int | None = None
    repair_of: int | None = None
    rows_written: int | None = field(default=None, compare=False)

    @property
    def partial(self) -> bool:
        """An append that wrote fewer rows than it claims offsets (Spark filtered unreadable ones out)."""
        return (
            self.repair_of is None
            and self.rows_written is not None
            and self.rows_written < sum(r.count() for r in self.ranges.values())
        )


def parse_user_metadata(
    version: int, user_metadata: str | None, rows_written: int | None = None
) -> SharelakeCommit | None:
    """The Sharelake part of a commit's userMetadata; None for commits Sharelake did not make."""
    if not user_metadata:
        return None
    try:
        doc = json.loads(user_metadata)
    except json.JSONDecodeError:
        return None
    body = doc.get(METADATA_KEY) if isinstance(doc, dict) else None
    if not isinstance(body, dict):
        return None
    ingested_at_us, repair_of = body.get("ingested_at_us"), body.get("repair_of")
    return SharelakeCommit(
        version,
        body.get("write_id"),
        BatchOffsets.from_json(body.get("ranges", {})),
        ingested_at_us=int(ingested_at_us) if ingested_at_us is not None else None,
        repair_of=int(repair_of) if repair_of is not None else None,
        rows_written=rows_written,
    )


def user_metadata_json(
    write_id: str, batch_id: int, ranges: Mapping[PartitionKey, OffsetRanges], ingested_at_us: int | None = None
) -> str:
    body = {"v": 1, "write_id": write_id, "batch_id": batch_id, "ranges": BatchOffsets(ranges).to_json()}
    if ingested_at_us is not None:
        body["ingested_at_us"] = ingested_at_us
    return json.dumps({METADATA_KEY: body})


def repair_metadata_json(write_id: str, repair_of: int, ranges: Mapping[PartitionKey, OffsetRanges]) -> str:
    """userMetadata of the DELETE that removes version `repair_of`'s duplicate rows at `ranges`."""
    body = {"v": 1, "write_id": write_id, "repair_of": repair_of, "ranges": BatchOffsets(ranges).to_json()}
    return json.dumps({METADATA_KEY: body})


class DeltaCommitLog:
    def __init__(self, spark: SparkSession, location: TableLocation, stamp_column: str = "ingested_at"):
        self._spark = spark
        self.location = location
        self.table_path = location.path
        self.stamp_column = stamp_column  # every row of one append carries the append's stamp here
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        self._jvm = jvm
        self._log_dir = jvm.org.apache.hadoop.fs.Path(location.delta_log)
        self._fs = self._log_dir.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    def exists(self) -> bool:
        return bool(DeltaTable.isDeltaTable(self._spark, self.table_path))

    def recent(self, limit: int) -> tuple[int, list[SharelakeCommit]]:
        """(latest version, Sharelake commits among the last `limit`); (-1, []) if no table yet."""
        if not self.exists():
            return -1, []
        history = DeltaTable.forPath(self._spark, self.table_path).history(limit)
        rows = history.select("version", "userMetadata", F.col("operationMetrics")["numOutputRows"].alias("rows"))
        commits, latest = [], -1
        for row in rows.collect():
            latest = max(latest, int(row.version))
            written = int(row.rows) if row.rows is not None else None
            parsed = parse_user_metadata(int(row.version), row.userMetadata, written)
            if parsed is not None:
                commits.append(parsed)
        return latest, sorted(commits, key=lambda c: c.version)

    def after(self, version: int, until: int | None = None) -> Iterator[tuple[int, SharelakeCommit | None]]:
        """Each commit after `version` (up to `until`), in order, until the first that does not exist yet."""
        v = version + 1
        while until is None or v <= until:
            text = self._read_commit_file(v)
            if text is None:
                return
            yield v, _sharelake_commit(v, text)
            v += 1

    def written_offsets(self, commit: SharelakeCommit) -> BatchOffsets:
        """The offsets the rows of `commit` (an append) hold in the table now, read by its write stamp."""
        if commit.ingested_at_us is None:
            return BatchOffsets(commit.ranges)
        rows = (
            self._spark.read.format("delta")
            .load(self.table_path)
            .where(F.col(self.stamp_column) == F.timestamp_micros(F.lit(commit.ingested_at_us)))
            .select("topic", "partition", "offset")
        )
        table: pa.Table = rows.toArrow()
        return BatchOffsets.of_rows(table)

    def _read_commit_file(self, version: int) -> str | None:
        path = self._jvm.org.apache.hadoop.fs.Path(self._log_dir, f"{version:020d}.json")
        if not self._fs.exists(path):  # one cheap call in the common case (no other writer)
            return None
        try:
            stream = self._fs.open(path)
        except Exception as e:  # py4j wraps java.io.FileNotFoundException
            if "FileNotFoundException" in str(e) or "No such file" in str(e):
                return None
            raise
        try:
            return str(self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()


def _sharelake_commit(version: int, commit_file: str) -> SharelakeCommit | None:
    for line in commit_file.splitlines():
        if line.startswith('{"commitInfo"'):
            info = json.loads(line)["commitInfo"]
            value = info.get("userMetadata")
            rows = (info.get("operationMetrics") or {}).get("numOutputRows")
            return parse_user_metadata(version, value if isinstance(value, str) else None, _int_or_none(rows))
    return None


def _int_or_none(value: object) -> int | None:
    try:
        return int(str(value)) if value is not None else None
    except ValueError:
        return None
