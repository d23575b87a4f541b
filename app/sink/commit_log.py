"""Reads the offset ranges that Sharelake commits recorded in a Delta table's transaction log.

Used by the dedup cache (`app.sink.dedup_cache`). Two ways in, both cheap and neither a scan of
the data files:
- `recent(limit)`: the last `limit` commits through Delta's own history API (at start);
- `after(version)`: the commit files `_delta_log/<version>.json` that follow a known version,
  opened one by one through the table's Hadoop FileSystem (every micro-batch: our own commit and
  any other writer's since the last look).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from app.sink.offset_ranges import OffsetRanges

METADATA_KEY = "sharelake"

PartitionKey = tuple[str, int]


@dataclass(frozen=True)
class SharelakeCommit:
    """A Sharelake commit: an append of `ranges` (its rows all carry `ingested_at_us`), or a repair.

    A repair commit (`repair_of` set) deleted the rows of version `repair_of` at the offsets in
    `ranges` because an earlier commit already held them; it adds no offsets to the table.
    """

    version: int
    write_id: str | None
    ranges: dict[PartitionKey, OffsetRanges]
    ingested_at_us: int | None = None
    repair_of: int | None = None


def parse_user_metadata(version: int, user_metadata: str | None) -> SharelakeCommit | None:
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
    ranges = {
        (topic, int(partition)): OffsetRanges((int(s), int(e)) for s, e in spans)
        for topic, partitions in body.get("ranges", {}).items()
        for partition, spans in partitions.items()
    }
    ingested_at_us, repair_of = body.get("ingested_at_us"), body.get("repair_of")
    return SharelakeCommit(
        version,
        body.get("write_id"),
        ranges,
        ingested_at_us=int(ingested_at_us) if ingested_at_us is not None else None,
        repair_of=int(repair_of) if repair_of is not None else None,
    )


def _ranges_json(ranges: dict[PartitionKey, OffsetRanges]) -> dict[str, dict[str, list[list[int]]]]:
    by_topic: dict[str, dict[str, list[list[int]]]] = {}
    for (topic, partition), r in sorted(ranges.items()):
        by_topic.setdefault(topic, {})[str(partition)] = r.to_json()
    return by_topic


def user_metadata_json(
    write_id: str, batch_id: int, ranges: dict[PartitionKey, OffsetRanges], ingested_at_us: int | None = None
) -> str:
    body = {"v": 1, "write_id": write_id, "batch_id": batch_id, "ranges": _ranges_json(ranges)}
    if ingested_at_us is not None:
        body["ingested_at_us"] = ingested_at_us
    return json.dumps({METADATA_KEY: body})


def repair_metadata_json(write_id: str, repair_of: int, ranges: dict[PartitionKey, OffsetRanges]) -> str:
    """userMetadata of the DELETE that removes version `repair_of`'s duplicate rows at `ranges`."""
    body = {"v": 1, "write_id": write_id, "repair_of": repair_of, "ranges": _ranges_json(ranges)}
    return json.dumps({METADATA_KEY: body})


class DeltaCommitLog:
    def __init__(self, spark: SparkSession, table_path: str):
        self._spark = spark
        self.table_path = table_path.rstrip("/")
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        self._jvm = jvm
        self._log_dir = jvm.org.apache.hadoop.fs.Path(self.table_path + "/_delta_log")
        self._fs = self._log_dir.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    def exists(self) -> bool:
        return bool(DeltaTable.isDeltaTable(self._spark, self.table_path))

    def recent(self, limit: int) -> tuple[int, list[SharelakeCommit]]:
        """(latest version, Sharelake commits among the last `limit`); (-1, []) if no table yet."""
        if not self.exists():
            return -1, []
        rows = DeltaTable.forPath(self._spark, self.table_path).history(limit).select("version", "userMetadata")
        commits, latest = [], -1
        for row in rows.collect():
            latest = max(latest, int(row.version))
            parsed = parse_user_metadata(int(row.version), row.userMetadata)
            if parsed is not None:
                commits.append(parsed)
        return latest, sorted(commits, key=lambda c: c.version)

    def after(self, version: int) -> Iterator[tuple[int, SharelakeCommit | None]]:
        """Each commit after `version`, in order, until the first version that does not exist yet."""
        v = version + 1
        while True:
            text = self._read_commit_file(v)
            if text is None:
                return
            yield v, parse_user_metadata(v, _commit_info_user_metadata(text))
            v += 1

    def _read_commit_file(self, version: int) -> str | None:
        path = self._jvm.org.apache.hadoop.fs.Path(self._log_dir, f"{version:020d}.json")
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


def _commit_info_user_metadata(commit_file: str) -> str | None:
    for line in commit_file.splitlines():
        if line.startswith('{"commitInfo"'):
            info = json.loads(line)["commitInfo"]
            value = info.get("userMetadata")
            return value if isinstance(value, str) else None
    return None
