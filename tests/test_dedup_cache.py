"""The dedup cache and the commit-log reader it is built on.

The reader is tested on a real Delta table (commits with and without Sharelake metadata); the
cache's own logic is tested with a stand-in log.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from pyspark.sql import SparkSession

from sharelake.sink.dedup.cache import DedupCache
from sharelake.sink.dedup.commit_log import (
    DeltaCommitLog,
    SharelakeCommit,
    parse_user_metadata,
    repair_metadata_json,
    user_metadata_json,
)
from sharelake.table.location import TableLocation
from sharelake.table.offset_ranges import OffsetRanges


def holds(cache: DedupCache, topic: str, partition: int, offset: int) -> bool:
    """Whether the cache holds one offset (the sink asks for many at once: `contains_many`)."""
    return bool(cache.contains_many((topic, partition), np.array([offset], dtype=np.int64))[0])


def ranges(**spans: list[tuple[int, int]]) -> dict[tuple[str, int], OffsetRanges]:
    return {("t", int(p.lstrip("p"))): OffsetRanges(s) for p, s in spans.items()}


def test_metadata_round_trip_and_foreign_commits() -> None:
    text = user_metadata_json("w1", 7, ranges(p0=[(0, 9), (20, 29)], p2=[(5, 5)]))
    commit = parse_user_metadata(3, text)
    assert commit is not None
    assert commit.version == 3 and commit.write_id == "w1"
    assert commit.ranges == ranges(p0=[(0, 9), (20, 29)], p2=[(5, 5)])
    for foreign in (None, "", "not json", '{"other": 1}', '{"sharelake": "x"}'):
        assert parse_user_metadata(1, foreign) is None


def append(spark: SparkSession, path: Path, offsets: list[int], metadata: str | None) -> None:
    df = spark.createDataFrame([("t", 0, o) for o in offsets], "topic string, partition int, offset long")
    writer = df.write.format("delta").mode("append")
    if metadata is not None:
        writer = writer.option("userMetadata", metadata)
    writer.save(str(path))


def test_commit_log_reads_recent_and_following_commits(spark: SparkSession, tmp_path: Path) -> None:
    table = tmp_path / "t"
    log = DeltaCommitLog(spark, TableLocation.at(table))
    assert log.recent(10) == (-1, [])
    assert list(log.after(-1)) == []

    append(spark, table, [0, 1, 2], user_metadata_json("a", 0, ranges(p0=[(0, 2)])))  # v0
    append(spark, table, [100], None)  # v1: someone else's commit, no Sharelake metadata
    append(spark, table, [3, 4], user_metadata_json("b", 1, ranges(p0=[(3, 4)])))  # v2

    latest, commits = log.recent(10)
    assert latest == 2
    assert [(c.version, c.write_id) for c in commits] == [(0, "a"), (2, "b")]
    assert [(c.version, c.write_id) for c in log.recent(1)[1]] == [(2, "b")]  # the lookback bound

    following = list(log.after(0))
    assert [(v, c.write_id if c else None) for v, c in following] == [(1, None), (2, "b")]
    assert list(log.after(2)) == []


class StubLog:
    """A commit log whose commits the test appends (for the cache's pure logic)."""

    def __init__(self) -> None:
        self.commits: list[SharelakeCommit] = []

    def recent(self, limit: int) -> tuple[int, list[SharelakeCommit]]:
        return (self.commits[-1].version if self.commits else -1), self.commits[-limit:]

    def after(self, version: int, until: int | None = None) -> Iterator[tuple[int, SharelakeCommit | None]]:
        for c in self.commits:
            if c.version > version and (until is None or c.version <= until):
                yield c.version, c


def test_cache_loads_refreshes_and_answers_membership() -> None:
    stub = StubLog()
    stub.commits.append(SharelakeCommit(0, "a", ranges(p0=[(0, 99)])))
    stub.commits.append(SharelakeCommit(1, "b", ranges(p0=[(100, 199)], p1=[(0, 9)])))
    log: Any = stub
    cache = DedupCache(log, lookback_commits=1)
    cache.load()
    assert cache.version == 1
    assert not holds(cache, "t", 0, 50)  # older than the lookback
    assert holds(cache, "t", 0, 150) and holds(cache, "t", 1, 9) and not holds(cache, "t", 1, 10)

    stub.commits.append(SharelakeCommit(2, "c", ranges(p0=[(200, 250)])))  # another writer's commit
    new = cache.refresh()
    assert [c.write_id for c in new] == ["c"] and cache.version == 2
    assert holds(cache, "t", 0, 250)
    assert cache.size() == 2  # p0 [100, 250] merged into one range, p1 [0, 9]
    assert cache.refresh() == []


def test_a_commit_holding_offsets_an_earlier_one_holds_is_a_pending_repair_until_repaired() -> None:
    cache = DedupCache(None)
    cache.fold(SharelakeCommit(5, "x", ranges(p0=[(15, 30)], p1=[(4, 4)])))
    cache.fold(SharelakeCommit(6, "y", ranges(p0=[(10, 19)], p1=[(0, 4)]), ingested_at_us=1))
    cache.fold(SharelakeCommit(7, "z", ranges(p2=[(0, 100)])))  # no overlap: nothing to repair
    [repair] = cache.repairs()
    assert repair.commit.version == 6 and repair.count() == 5 + 1
    assert repair.duplicates == ranges(p0=[(15, 19)], p1=[(4, 4)])
    assert holds(cache, "t", 0, 10)  # the offsets are in the table either way

    cache.fold(SharelakeCommit(8, "r", ranges(p0=[(15, 19)], p1=[(4, 4)]), repair_of=6))  # the repair commit
    assert cache.repairs() == []
    cache.fold(SharelakeCommit(9, "w", ranges(p0=[(19, 19)])))
    cache.repaired(9)
    assert cache.repairs() == []


def test_repair_metadata_round_trip() -> None:
    commit = parse_user_metadata(4, user_metadata_json("w", 1, ranges(p0=[(0, 9)]), ingested_at_us=1234567890123456))
    assert commit is not None and commit.ingested_at_us == 1234567890123456 and commit.repair_of is None
    repair = parse_user_metadata(5, repair_metadata_json("r", 4, ranges(p0=[(3, 4)])))
    assert repair is not None and repair.repair_of == 4 and repair.ranges == ranges(p0=[(3, 4)])
