"""The share group's state now: its members, each partition's start offset and lag, each table's last
Sharelake commit.

Called by `sharelake status` (text or `--json`) and, for the partitions and members alone, by the
job's lag gauge (`app.group_lag`). The group comes from the Kafka Java Admin in the driver's JVM
(`app.java_admin`: `describeShareGroups`, `listShareGroupOffsets`); the commits from each table's
Delta history (the newest commit whose userMetadata Sharelake wrote, `app.sink.commit_log`).

What the admin API gives per partition is the share-partition start offset and the lag (records
at or after the start offset not yet delivered to completion: available or in flight), not how
many records are in flight (acquired, undecided) now; a running job's in-flight count is its own
metric (polled minus decided).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from delta.tables import DeltaTable
from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from app.config import SharelakeConfig
from app.error_lines import ConfigError, one_line
from app.java_admin import ADMIN_TIMEOUT_MS, close_admin, create_admin
from app.sink.catalog_tables import locate_tables
from app.sink.commit_log import parse_user_metadata

HISTORY_DEPTH = 100  # commits of a table's history searched for its last Sharelake commit
NO_SUCH_GROUP = "does not exist"  # the state of a group the broker does not know (no member ever joined)


@dataclass(frozen=True)
class Member:
    member_id: str
    client_id: str
    host: str
    partitions: list[tuple[str, int]]


@dataclass(frozen=True)
class PartitionState:
    topic: str
    partition: int
    start_offset: int | None  # None: the group holds no state for the partition yet
    lag: int | None  # None: the broker did not report one
    in_flight: int | None = None  # not in the admin API: None unless a running job says


@dataclass(frozen=True)
class TableCommit:
    table: str  # its location
    version: int | None  # of the newest Sharelake commit; None: no table, or no Sharelake commit in reach
    timestamp: float | None  # the commit's time, seconds since the epoch
    age_s: float | None  # seconds since then, when read


@dataclass(frozen=True)
class GroupState:
    """What the broker says about the group: its state, members and partitions."""

    group_id: str
    state: str  # the broker's: Stable, Empty, ...; NO_SUCH_GROUP when it does not exist
    members: list[Member]
    partitions: list[PartitionState]


@dataclass(frozen=True)
class GroupStatus:
    group_id: str
    state: str
    members: list[Member]
    partitions: list[PartitionState]
    tables: list[TableCommit] = field(default_factory=list)
    read_at: float = field(default_factory=time.time)

    @property
    def total_lag(self) -> int:
        return sum(p.lag or 0 for p in self.partitions)

    def lines(self) -> list[str]:
        """A readable table for a terminal."""
        out = [f"share group {self.group_id}: {self.state}, {len(self.members)} members, lag {self.total_lag}"]
        for m in self.members:
            assigned = ", ".join(f"{t}-{p}" for t, p in m.partitions) or "none"
            out.append(f"  member {m.member_id} ({m.client_id} on {m.host}): {assigned}")
        if self.partitions:
            width = max(len(p.topic) for p in self.partitions)
            out.append(f"  {'topic'.ljust(width)}  partition  start offset        lag  in flight")
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


def read_group_state(spark: SparkSession, admin: Any, group_id: str) -> GroupState:
    """The group's members and partition offsets through a Java Admin (`app.java_admin.create_admin`)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    ms = jvm.java.util.concurrent.TimeUnit.MILLISECONDS
    groups = jvm.java.util.Collections.singletonList(group_id)
    try:
        described = admin.describeShareGroups(groups).describedGroups().get(group_id).get(ADMIN_TIMEOUT_MS, ms)
    except Py4JJavaError as e:
        cause = e.java_exception.getCause()
        if cause is None or cause.getClass().getSimpleName() != "GroupIdNotFoundException":
            raise
        if "not a share group" in str(cause.getMessage()):
            raise ConfigError(
                f"kafka.group_id = {group_id!r} is not a share group: the status reads share groups "
                "(a consumer group: kafka-consumer-groups.sh --describe)"
            ) from None
        return GroupState(group_id, NO_SUCH_GROUP, [], [])
    members = []
    for m in jvm.java.util.ArrayList(described.members()):
        assigned = sorted((str(tp.topic()), int(tp.partition())) for tp in m.assignment().topicPartitions())
        members.append(Member(str(m.consumerId()), str(m.clientId()), str(m.host()), assigned))
    all_partitions = jvm.org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec()
    spec = jvm.java.util.Collections.singletonMap(group_id, all_partitions)
    offsets = admin.listShareGroupOffsets(spec).partitionsToOffsetInfo(group_id).get(ADMIN_TIMEOUT_MS, ms)
    partitions = []
    for tp in offsets.keySet():
        info = offsets.get(tp)
        start = None if info is None else int(info.startOffset())
        lag = None if info is None or not info.lag().isPresent() else int(info.lag().get())
        partitions.append(PartitionState(str(tp.topic()), int(tp.partition()), start, lag))
    partitions.sort(key=lambda p: (p.topic, p.partition))
    return GroupState(group_id, str(described.groupState()), sorted(members, key=lambda m: m.member_id), partitions)


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
    """The group of `cfg` (members, partitions) and the last Sharelake commit of each of its tables.

    ConfigError (one line) when the group is not a share group or the broker does not answer."""
    if cfg.kafka.group_type != "share":
        raise ConfigError(
            'kafka.group_type = "consumer": the status reads share groups (a consumer group: '
            "kafka-consumer-groups.sh --describe)"
        )
    admin = create_admin(spark, cfg.kafka.client_config())
    try:
        group = read_group_state(spark, admin, cfg.kafka.group_id)
    except Py4JJavaError as e:
        raise ConfigError(
            f"the share group {cfg.kafka.group_id!r} could not be read from kafka.bootstrap_servers = "
            f"{cfg.kafka.bootstrap_servers} ({one_line(e.java_exception)}): check the broker answers and "
            "the kafka.client security settings"
        ) from None
    finally:
        close_admin(spark, admin)
    locate_tables(spark, cfg)  # tables by catalog name
    now = time.time()
    tables = [last_sharelake_commit(spark, location.path, now) for location in cfg.table_locations()]
    return GroupStatus(group.group_id, group.state, group.members, group.partitions, tables, now)
