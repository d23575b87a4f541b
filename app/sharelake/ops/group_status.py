"""`sharelake status`'s table: the group's state now (its members, each partition's offset and lag) beside each
table's last Sharelake commit.

Shown as text or `--json`. The group's state is read where it always is (`sharelake.consume.group_state`, through
the type `kafka.group_type` names in `sharelake.consume.group_types`): a share group's members, share-partition
start offsets and lag from the Kafka Java Admin; a consumer group's members, committed offsets and lag to the end
offsets from librdkafka's. The commits come from each table's Delta history (the newest commit whose userMetadata
Sharelake wrote, `sharelake.sink.dedup.commit_log`).

What the admin API gives per partition is an offset and a lag, not how many records are in flight
(acquired, undecided) now; a running job's in-flight count is its own metric (polled minus decided).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from sharelake.config.settings import SharelakeConfig
from sharelake.consume.group_state import read_group_state
from sharelake.consume.group_type import NO_SUCH_GROUP, GroupMember, PartitionState
from sharelake.consume.group_types import group_type
from sharelake.sink.dedup.commit_log import parse_user_metadata
from sharelake.sink.delta.catalog_tables import located_routes

__all__ = ["NO_SUCH_GROUP", "GroupStatus", "TableCommit", "last_sharelake_commit", "read_group_status"]

HISTORY_DEPTH = 100  # commits of a table's history searched for its last Sharelake commit


@dataclass(frozen=True)
class TableCommit:
    table: str  # its location
    version: int | None  # of the newest Sharelake commit; None: no table, or no Sharelake commit in reach
    timestamp: float | None  # the commit's time, seconds since the epoch
    age_s: float | None  # seconds since then, when read


@dataclass(frozen=True)
class GroupStatus:
    group_id: str
    state: str
    members: list[GroupMember]
    partitions: list[PartitionState]
    tables: list[TableCommit] = field(default_factory=list)
    read_at: float = field(default_factory=time.time)
    group_type: str = "share"  # kafka.group_type
    noun: str = "share group"  # the group type's name for it
    offset_label: str = "start offset"  # the group type's name for a partition's offset

    @property
    def total_lag(self) -> int:
        return sum(p.lag or 0 for p in self.partitions)

    def lines(self) -> list[str]:
        """A readable table for a terminal."""
        noun, offset = self.noun, self.offset_label
        out = [f"{noun} {self.group_id}: {self.state}, {len(self.members)} members, lag {self.total_lag}"]
        for m in self.members:
            assigned = ", ".join(f"{t}-{p}" for t, p in m.partitions) or "none"
            out.append(f"  member {m.member_id} ({m.client_id} on {m.host}): {assigned}")
        if self.partitions:
            width = max(len(p.topic) for p in self.partitions)
            out.append(f"  {'topic'.ljust(width)}  partition  {offset:>12}        lag  in flight")
            for p in self.partitions:
                out.append(
                    f"  {p.topic.ljust(width)}  {p.partition:>9}  {_num(p.start_offset):>12}"
                    f"  {_num(p.lag):>9}  {_num(p.in_flight):>9}"
                )
        else:
            out.append("  no partition state: the group has not consumed yet")
        for t in self.tables:
            if t.version is None:
                out.append(f"  table {t.table}: no Sharelake commit")
            else:
                stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t.timestamp or 0))
                out.append(f"  table {t.table}: last Sharelake commit v{t.version} at {stamp} ({_age(t.age_s)} ago)")
        return out

    def as_json(self) -> dict[str, Any]:
        """The same as plain data, for `--json`."""
        out = asdict(self)
        out["total_lag"] = self.total_lag
        for m in out["members"]:
            m["partitions"] = [{"topic": t, "partition": p} for t, p in m["partitions"]]
        return out


def _num(value: int | None) -> str:
    return "-" if value is None else str(value)


def _age(seconds: float | None) -> str:
    s = int(seconds or 0)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def last_sharelake_commit(spark: SparkSession, table: str, now: float | None = None) -> TableCommit:
    """The newest commit of `table` that Sharelake wrote (among its last `HISTORY_DEPTH`)."""
    if not DeltaTable.isDeltaTable(spark, table):
        return TableCommit(table, None, None, None)
    history = DeltaTable.forPath(spark, table).history(HISTORY_DEPTH)
    rows = history.select("version", F.col("timestamp").cast("double").alias("at"), "userMetadata").collect()
    for row in sorted(rows, key=lambda r: -int(r.version)):
        if parse_user_metadata(int(row.version), row.userMetadata) is not None:
            at = float(row.at)
            return TableCommit(table, int(row.version), at, max(0.0, (now or time.time()) - at))
    return TableCommit(table, None, None, None)


def read_group_status(spark: SparkSession, cfg: SharelakeConfig) -> GroupStatus:
    """The group of `cfg` (members, partitions: its group type's state) and the last Sharelake commit
    of each of its tables.

    ConfigError (one line) when the group is of the other type or the broker does not answer."""
    group = group_type(cfg.kafka)
    state = read_group_state(group, cfg.kafka, spark)
    routes = located_routes(spark, cfg)  # tables by catalog name
    now = time.time()
    tables = [last_sharelake_commit(spark, location.path, now) for location in routes.tables()]
    return GroupStatus(
        state.group_id,
        state.state,
        state.members,
        state.partitions,
        tables,
        now,
        group.name,
        group.noun,
        group.offset_label,
    )
