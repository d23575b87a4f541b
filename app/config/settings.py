"""The config's models: one pydantic model per section of a Sharelake config file, validated.

Validation is pydantic's: unknown keys, wrong types and missing required keys all fail, and each
section's rules (a validator each) name the keys they concern; reading a file and its `--set`
overrides is `app.config.loader`'s. The models are the one source of every key's documentation: each
field's `description` (and each section's docstring) is what `docs/configuration.md` shows, generated
by `devkit.config_reference`; `conf/local.toml` is checked against them (tests/test_docs.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from app.failures.errors import ConfigError
from app.formats import PayloadSettings
from app.formats.base import FormatSettings
from app.formats.raw import RawSettings
from app.secrets import resolve_secret
from app.table.columns import ROW_SCHEMA
from app.table.layout import TableLayout
from app.table.location import TableLocation

__all__ = ["ConfigError", "Route", "SharelakeConfig"]


RESERVED_COLUMNS = frozenset(ROW_SCHEMA.names)  # the record's and the write's columns in every main table
MAX_RECORD_LOCKS = 10_000  # Kafka's bound on share.partition.max.record.locks, whatever the broker allows


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KafkaConfig(_Section):
    """`[kafka]`: the broker, the topic(s) and the group the job consumes."""

    bootstrap_servers: str = Field(description="The broker(s) to start from, `host:port[,host:port...]`.")
    topic: str | None = Field(
        default=None,
        description="The one topic the job reads, into `delta.table_path` (or `delta.table_name`). "
        "Exactly one of `topic` and `topics`.",
    )
    topics: list[str] | None = Field(
        default=None,
        description="Instead of `topic`: several topics, each routed by its `[topics.<name>]` section into its "
        "own table (`docs/routing.md`). `--set kafka.topics=[...]` replaces the file's `topic` and `delta.table_path`.",
    )
    group_id: str = Field(description='The share group (or, with `group_type = "consumer"`, the consumer group).')
    group_type: Literal["share", "consumer"] = Field(
        default="share",
        description='`"share"`: a share group (KIP-932, brokers 4.2+): per-record acknowledgements, members '
        'beyond the partition count. `"consumer"`: a classic consumer group, offsets committed to Kafka after the '
        "Delta commit: order per partition, at most one member per partition, rebalances pause the group, no "
        "per-record RELEASE. The same tables, dedup, dead letters and replay; the group settings below apply to "
        "share groups only (`docs/group-types.md`).",
    )
    auto_offset_reset: Literal["earliest", "latest", "unchanged"] = Field(
        default="earliest",
        description="Set on the share group at start (IncrementalAlterConfigs on the GROUP resource); a consumer "
        "group's `auto.offset.reset`. The broker's default is `latest`, which skips records produced before the "
        "group first existed.",
    )
    record_lock_duration_ms: int | None = Field(
        default=None,
        ge=1000,
        description="Set the group's `share.record.lock.duration.ms` at start (the broker bounds it by "
        "`group.share.min/max.record.lock.duration.ms`). Unset: keep the group's value (30 s by default).",
    )
    partition_max_record_locks: Annotated[int, Field(ge=100, le=MAX_RECORD_LOCKS)] | Literal["max", "unchanged"] = (
        Field(
            default="max",
            description="The group's `share.partition.max.record.locks`, set at start: records of one partition "
            "in flight (acquired, undecided) at once; throughput is bounded by locks x partitions per batch cycle. "
            '`"max"` raises it to the broker\'s cap `group.share.max.partition.max.record.locks` (4,000 on a stock '
            "broker, at most Kafka's 10,000; the banner says when the cap binds; reading it needs DESCRIBE_CONFIGS "
            "on the cluster, else the group's value is kept); a number sets it (refused by a 4.2 broker); "
            '`"unchanged"` keeps the group\'s (2,000 unless set).',
        )
    )
    broker_dead_letter_topic: str | None = Field(
        default=None,
        min_length=1,
        description="Brokers 4.4+ (KIP-1191): the share group's own dead-letter topic, set on the group at start "
        "(`errors.deadletterqueue.topic.name`). The broker copies there each record it archives: the delivery "
        "limit reached (also while no job runs) and each REJECT. The topic needs "
        "`errors.deadletterqueue.group.enable=true` (a missing one the job creates so) and a name starting with "
        "the broker's `errors.deadletterqueue.topic.name.prefix` (`dlq.` by default). Unset: the group's setting "
        "is left as it is. Sharelake's dead-letter table stays the primary record (`docs/dead-letters.md`).",
    )
    broker_dead_letter_copy_record: bool = Field(
        default=True,
        description="With `broker_dead_letter_topic`: also copy each record's key and value there "
        "(`errors.deadletterqueue.copy.record.enable`); false: the broker writes its `__dlq.errors.*` headers alone "
        "(the replay then reads the source topic).",
    )
    client: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        description="Extra librdkafka settings for every Kafka client of the job (share consumers, admin, replay "
        'producer), by their dotted names: `"sasl.mechanism" = "SCRAM-SHA-512"` or '
        "`--set kafka.client.sasl.mechanism=...`. `bootstrap.servers`, `group.id` and `share.acknowledgement.mode` "
        "are the job's. A value `env:NAME` is read from that environment variable at start, `file:/path` from that "
        "file: the way to pass a password, never on a command line (`docs/security.md`). Never logged.",
    )

    @model_validator(mode="after")
    def _topic_or_topics(self) -> KafkaConfig:
        if (self.topic is None) == (self.topics is None):
            raise ValueError("set kafka.topic (one topic into delta.table_path) or kafka.topics (routed), not both")
        if self.topics is not None and not self.topics:
            raise ValueError("kafka.topics is empty: list the topics the job reads")
        if self.topics is not None and len(set(self.topics)) != len(self.topics):
            raise ValueError("kafka.topics names a topic twice")
        return self

    @field_validator("broker_dead_letter_topic")
    @classmethod
    def _not_internal(cls, v: str | None) -> str | None:
        if v is not None and v.startswith("__"):
            raise ValueError("a dead-letter topic's name must not start with '__' (Kafka's internal topics)")
        return v

    @property
    def subscribed(self) -> list[str]:
        """The topics the job's share group members subscribe to."""
        return list(self.topics) if self.topics is not None else [str(self.topic)]

    def client_config(self) -> dict[str, Any]:
        """librdkafka settings every client of the job starts from: kafka.client + the broker + logging."""
        return {
            **self.client,
            "bootstrap.servers": self.bootstrap_servers,
            "logger": logging.getLogger("sharelake.kafka.client"),  # librdkafka logs into Python logging
        }

    @field_validator("client", mode="before")
    @classmethod
    def _dotted_names(cls, v: Any) -> Any:
        """librdkafka names have dots: `sasl.password = ...` in TOML, or `--set
        kafka.client.sasl.password=...`, arrive as nested tables; flatten them back."""
        return flatten_dotted(v)

    @field_validator("client")
    @classmethod
    def _no_reserved_client_keys(cls, v: dict[str, Any]) -> dict[str, Any]:
        reserved = {"bootstrap.servers", "group.id", "share.acknowledgement.mode"}
        clash = reserved & set(v)
        if clash:
            raise ValueError(f"set {sorted(clash)} with the kafka.* keys, not in kafka.client")
        return v

    @field_validator("client")
    @classmethod
    def _secret_references(cls, v: dict[str, Any]) -> dict[str, Any]:
        """`env:NAME` and `file:/path` values are read from the environment or a file at start."""
        return {k: resolve_secret(f"kafka.client.{k}", x) if isinstance(x, str) else x for k, x in v.items()}


def flatten_dotted(v: Any) -> Any:
    """Dotted names (`a.b.c = 1` in TOML, or `--set section.a.b.c=1`) arrive as nested tables:
    flatten them back to {"a.b.c": 1}."""
    if not isinstance(v, dict):
        return v
    flat: dict[str, Any] = {}

    def walk(prefix: str, node: dict[str, Any]) -> None:
        for key, value in node.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(value, dict):
                walk(name, value)
            else:
                flat[name] = value

    walk("", v)
    return flat


class PumpConfig(_Section):
    """`[pump]`: the group members in the driver, each a thread owning one Kafka consumer."""

    members: int = Field(
        default=4, ge=1, le=64, description="Group members (threads, one consumer each) in the driver, at start."
    )
    min_members: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="Elastic members: the pool shrinks to this from the measured buffer fill, busy time and batch "
        "cycle (unset: `members`, a fixed pool). No rebalance pauses the others (`docs/operations.md`).",
    )
    max_members: int | None = Field(
        default=None, ge=1, le=64, description="Elastic members: the pool grows to this (unset: `members`)."
    )
    max_poll_records: int = Field(
        default=40_000,
        ge=1,
        description="Records one poll may return (a soft limit: the broker rounds up to whole record batches). "
        "A poll spans partitions, each holding at most its record locks (Kafka allows 10,000): with a backlog "
        "the members' polls fill the partitions' lock window (up to `buffer_max_records`), so a batch grows "
        "with the backlog and the partitions; a light stream's polls stay small.",
    )
    poll_timeout_ms: int = Field(default=200, ge=10, description="How long one poll waits for records.")
    acknowledgement_commit: Literal["sync", "async"] = Field(
        default="sync",
        description='Share groups: how a member sends a decided poll\'s acknowledgements. `"sync"` waits in '
        '`commit_sync` for the broker\'s answer before polling again; `"async"` sends them with `commit_async` '
        "and polls at once (the answers arrive in a later poll; a refused partition counts as an ack error and "
        "its records come back). Measured in `docs/tuning.md`.",
    )
    buffer_max_records: int = Field(
        default=160_000,
        ge=1,
        description="Bound of the in-driver RecordBuffer: members wait when it is full (backpressure; the driver's "
        "memory follows the config, not the backlog).",
    )

    @model_validator(mode="after")
    def _bounds_hold_members(self) -> PumpConfig:
        if not self.lowest <= self.members <= self.highest:
            raise ValueError(
                f"pump.min_members ({self.lowest}) <= pump.members ({self.members}) <= pump.max_members "
                f"({self.highest}) does not hold; fix the bounds"
            )
        return self

    @property
    def lowest(self) -> int:
        return self.min_members if self.min_members is not None else self.members

    @property
    def highest(self) -> int:
        return self.max_members if self.max_members is not None else self.members


class BatchConfig(_Section):
    """`[batch]`: the micro-batches; each is at most one Delta commit per table."""

    max_records: int = Field(
        default=160_000, ge=1, description="Records one micro-batch (one Delta commit per table) takes at most."
    )
    max_wait_ms: int = Field(
        default=200, ge=0, description="How long a micro-batch waits for its first poll before it skips."
    )
    linger_ms: int = Field(
        default=50,
        ge=0,
        description="Once a batch has its first poll, how long it waits for the other members' polls (they land "
        "within tens of milliseconds of each other): fewer, larger commits for at most this much latency.",
    )
    write_attempts: int = Field(
        default=4,
        ge=1,
        description="A failed Delta write RELEASEs its records and is retried with backoff; after this many "
        "failures in a row the job fails (exit 1). Keep it below the group's delivery count limit (5).",
    )


_INTERVAL = r"^interval \d+ (second|minute|hour|day|week)s?$"
_UNIT_S = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}
MIN_LOG_RETENTION_S = 600


def interval_s(interval: str) -> int:
    """Seconds in a Delta interval string of `_INTERVAL`'s form (`interval 7 days` -> 604800)."""
    _, count, unit = interval.split()
    return int(count) * _UNIT_S[unit.rstrip("s")]


MAX_CLUSTERING_COLUMNS = 4  # Delta's bound on a table's clustering columns


class LayoutKeys(_Section):
    """A main table's layout keys: in `[delta]` for `kafka.topic`'s table, in `[topics.<name>]` for a
    routed topic's (`app.table.layout.TableLayout`, `docs/table-layouts.md`)."""

    partition_by: list[str] = Field(
        default=[],
        description="The table's partition columns, set when Sharelake creates it: record columns (`topic`, "
        '`partition`), payload columns, or generated ones (`generated_columns`), e.g. `["day"]`. A job on an '
        "existing table with another layout stops at start. Not with `cluster_by`.",
    )
    cluster_by: list[str] = Field(
        default=[],
        description="Instead of `partition_by`: the table's liquid-clustering columns (at most 4), set when "
        "Sharelake creates it; `sharelake maintain` (OPTIMIZE) clusters the rows by them.",
    )
    generated_columns: dict[str, str] = Field(
        default={},
        description="Columns Delta computes on each write from the row's other columns, by name: a SQL "
        'expression, e.g. `{ day = "CAST(kafka_timestamp AS DATE)" }` (the Kafka timestamp\'s day) or '
        '`"CAST(ts AS DATE)"` (a payload field\'s). What `partition_by` usually names.',
    )

    @model_validator(mode="after")
    def _one_layout(self) -> LayoutKeys:
        if self.partition_by and self.cluster_by:
            raise ValueError(
                "partition_by and cluster_by are both set: a Delta table is partitioned or clustered, "
                "not both; keep one"
            )
        if len(self.cluster_by) > MAX_CLUSTERING_COLUMNS:
            raise ValueError(f"cluster_by names {len(self.cluster_by)} columns: Delta clusters by at most 4")
        for keys in (self.partition_by, self.cluster_by):
            twice = sorted({c for c in keys if keys.count(c) > 1})
            if twice:
                raise ValueError(f"{twice[0]} is named twice in the layout's columns: name each column once")
        taken = [name for name in self.generated_columns if name in RESERVED_COLUMNS]
        if taken:
            raise ValueError(
                f"generated_columns.{taken[0]} is a column Sharelake writes itself: give the generated column "
                "another name"
            )
        empty = [name for name, expr in self.generated_columns.items() if not expr.strip()]
        if empty:
            raise ValueError(f"generated_columns.{empty[0]} has no expression: give it a SQL expression")
        return self

    def layout(self) -> TableLayout:
        """The layout these keys ask for (empty: the table keeps whatever it has)."""
        return TableLayout(tuple(self.partition_by), tuple(self.cluster_by), tuple(self.generated_columns.items()))


# the record columns an upsert key cannot name: each record has its own (`key`, the record key, can)
UNKEYABLE_COLUMNS = frozenset(RESERVED_COLUMNS - {"key"})


class WriteConfig(_Section):
    """`[write]`: how a main table takes its records: appended, or upserted by key (`docs/upserts.md`).
    A routed topic's `[topics.<name>.write]` replaces it for that topic's table."""

    mode: Literal["append", "upsert"] = Field(
        default="append",
        description='`"append"`: every record is a row. `"upsert"`: one row per `keys` value, the version from the '
        "record with the highest `(partition, offset)`; a redelivered or late older record never overwrites it "
        "(`docs/upserts.md`). A table keeps the mode it was created with.",
    )
    keys: list[str] = Field(
        default=[],
        description='Upsert only: the columns that identify a row, e.g. `["id"]`: payload columns, or `key` (the '
        "record key as `payload.key_format` reads it). A record whose key column is null is dead-lettered "
        "(`missing_key`).",
    )
    delete_on_tombstone: bool = Field(
        default=False,
        description="Upsert only: a record without a value (a tombstone) deletes its key. The row stays, flagged "
        "`__deleted`, so a late older record cannot bring the key back; readers filter `NOT __deleted`. Its key "
        "columns come from the record key (`docs/upserts.md`). Off: tombstones follow `payload.allow_null_value`.",
    )

    @model_validator(mode="after")
    def _keys_with_upsert(self) -> WriteConfig:
        if self.mode == "upsert" and not self.keys:
            raise ValueError('mode = "upsert" needs keys: the columns that identify a row, e.g. keys = ["id"]')
        if self.mode == "append" and (self.keys or self.delete_on_tombstone):
            raise ValueError(
                'keys and delete_on_tombstone are for mode = "upsert": set write.mode = "upsert" or drop them'
            )
        taken = sorted(k for k in self.keys if k in UNKEYABLE_COLUMNS)
        if taken:
            raise ValueError(
                f"keys names {taken[0]}, a column every record has its own value of: name payload columns "
                "(or `key`, the record key)"
            )
        twice = sorted({k for k in self.keys if self.keys.count(k) > 1})
        if twice:
            raise ValueError(f"keys names {twice[0]} twice: name each column once")
        return self


class DeltaConfig(LayoutKeys):
    """`[delta]`: the main table of `kafka.topic` and how Sharelake keeps it."""

    table_path: str | None = Field(
        default=None,
        description="The table of `kafka.topic`, by path: local, `hdfs://`, `s3a://`, `abfss://`, `gs://` "
        "(`docs/storage.md`); created on first write. Exactly one of `table_path` and `table_name`; routed topics "
        "name theirs in `[topics.<name>]`.",
    )
    table_name: str | None = Field(
        default=None,
        description="Instead of `table_path`: the table by its name in the session's catalog, `db.events` "
        "(`docs/storage.md`, Catalogs).",
    )
    checkpoint_path: str | None = Field(
        default=None,
        description="The trigger clock's streaming checkpoint. It holds only rate-source offsets, so by default "
        "each run uses a fresh temporary one on the driver (replicas of a job never collide); set a path to keep "
        "Spark's batch ids across restarts (Spark then re-runs an uncommitted batch id after a crash: safe).",
    )
    dedup_lookback_commits: int = Field(
        default=1000,
        ge=1,
        description="Recent commits whose offset ranges the dedup cache loads at start (`docs/ARCHITECTURE.md`).",
    )
    checkpoint_interval: int = Field(
        default=100,
        ge=1,
        description="Sharelake checkpoints a table every this many of its commits, in a background thread (Delta "
        "Kernel), never inside a commit and never holding record locks, then deletes its expired log files. The "
        "tables Sharelake creates get `delta.checkpointInterval` = 10 x this, so Delta's own in-commit checkpoint "
        "only backstops other writers; an existing table keeps its interval (Delta then checkpoints inside the "
        "commit that reaches it; the records are ACCEPTed before that; to leave it to Sharelake: `ALTER TABLE "
        "<table> SET TBLPROPERTIES ('delta.checkpointInterval' = '1000')`).",
    )
    log_retention: str = Field(
        default="interval 7 days",
        pattern=_INTERVAL,
        description="`delta.logRetentionDuration` of the tables Sharelake creates: how long commit files stay in "
        "`_delta_log` (each append lists them: its cost grows with their number), hence how far back time travel "
        "and a lagging downstream stream reader can go. The background checkpoints delete the expired ones. Shorter "
        "than 7 days also sets `delta.deletedFileRetentionDuration` to it (Delta requires it). Default: VACUUM's 7 "
        "days; at least `interval 10 minutes` (`docs/storage.md`, Table health).",
    )
    writer_lease_s: float = Field(
        default=30.0,
        ge=3.0,
        description="S3 only (no mutual exclusion for Delta commits): the TTL of the writer lease the job holds on "
        "each table, renewed every third of it. A second job finding it renewed stops at start; a restart after a "
        "crash waits this long for the dead job's lease. Not used with Delta's S3DynamoDBLogStore.",
    )

    @field_validator("log_retention")
    @classmethod
    def _log_retention_floor(cls, value: str) -> str:
        if interval_s(value) < MIN_LOG_RETENTION_S:
            raise ValueError(
                "at least 'interval 10 minutes': a job's dedup cache reads other writers' commits "
                "before they expire, and a restart the commits of its last record lock"
            )
        return value


class DeadLetterConfig(_Section):
    """`[dead_letter]`: the Delta table of the records that cannot land, raw, with their error class."""

    table_path: str | None = Field(
        default=None,
        description="The dead-letter table by path. Default: the main table's path (or name) + `_dead_letter`; "
        "required with `kafka.topics`, where all topics share it.",
    )
    table_name: str | None = Field(default=None, description="Instead of `table_path`: the table by catalog name.")
    max_delivery_count: int = Field(
        default=4,
        ge=1,
        description="A record delivered this many times is dead-lettered (`delivery_count_exceeded`) instead of "
        "tried again. Must stay below the group's `share.delivery.count.limit` (default 5; checked at start), "
        "where the broker would archive the record without anyone seeing it.",
    )


class MaintenanceConfig(_Section):
    """`[maintenance]`: `sharelake maintain` (app.ops.maintenance): OPTIMIZE, then VACUUM, every table of the config."""

    optimize: bool = Field(default=True, description="Compact each table's small files with OPTIMIZE.")
    vacuum: bool = Field(default=True, description="Then delete the files no version within the retention needs.")
    vacuum_retain_hours: float = Field(
        default=168.0,
        ge=0,
        description="VACUUM keeps the files any version of the last this-many hours needs (time travel that far). "
        "Delta refuses less than the table's `delta.deletedFileRetentionDuration` (7 days) unless "
        "`spark.databricks.delta.retentionDurationCheck.enabled` is false in `[spark_conf]`.",
    )
    vacuum_mode: Literal["lite", "full"] = Field(
        default="lite",
        description="`lite`: delete the files the log's remove actions name (fast; falls back to full when the log "
        "since the last VACUUM was cleaned up); `full`: list the whole table folder, which also finds stray files "
        "and takes several times longer.",
    )


class MetricsConfig(_Section):
    """`[metrics]`: the progress line and the Prometheus endpoint (`docs/operations.md`)."""

    prometheus_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="Serve the job's counters for Prometheus on `http://<prometheus_addr>:<port>/metrics` "
        "(unset: off).",
    )
    prometheus_addr: str = Field(default="0.0.0.0", description="The address the Prometheus endpoint listens on.")
    lag_interval_s: float = Field(
        default=15.0,
        ge=1.0,
        description="With the endpoint on: how often the group's lag per partition and its members are read "
        "(`sharelake_group_lag`, `sharelake_group_members`; a share group's through the Kafka Java Admin, a "
        "consumer group's through librdkafka's admin client).",
    )
    progress_log: bool = Field(
        default=True,
        description="One log line per micro-batch (records in, ACCEPTed, RELEASEd, REJECTed, step times).",
    )


class RunConfig(_Section):
    """`[run]`: how long the job runs and how it stops."""

    mode: Literal["continuous", "until-drained", "available-now"] = Field(
        default="continuous",
        description="`continuous`: until SIGTERM/SIGINT. `until-drained` (alias `available-now`, for scheduled "
        "jobs): drain the backlog, then exit 0.",
    )
    idle_timeout_ms: int = Field(
        default=5000,
        ge=100,
        description="until-drained: stop once records have arrived and none came for this long, with nothing "
        "polled still undecided ...",
    )
    empty_timeout_ms: int = Field(
        default=30_000,
        ge=100,
        description="... or, when no record at all arrived, this long from the start (the group join takes seconds).",
    )
    stop_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="Graceful-stop bound (SIGTERM, SIGINT): records still undecided after it are RELEASEd.",
    )
    app_name: str = Field(default="sharelake-ingest", description="The Spark application's name.")
    dependency_wait_s: float = Field(
        default=300.0,
        ge=0,
        description="At start, how long to wait for a dependency that is down (the broker, the schema registry or a "
        "table's store not answering, a timeout, a 5xx) before exiting with code 3; a wrong setting (credentials "
        "refused, an unknown host) exits 2 at once. 0: do not wait.",
    )


class TopicRoute(LayoutKeys):
    """`[topics.<name>]`: where one of kafka.topics lands, how its values are read, its table's layout."""

    table_path: str | None = Field(default=None, description="The topic's table, by path.")
    table_name: str | None = Field(
        default=None, description="Instead of `table_path`: the table by catalog name (exactly one of the two)."
    )
    write: WriteConfig | None = Field(
        default=None,
        description="`[topics.<name>.write]`: how this topic's table takes its records, in place of `[write]` "
        "(`mode`, `keys`, `delete_on_tombstone`). Topics sharing a table share its write mode.",
    )
    payload: PayloadSettings = Field(
        default=RawSettings(),
        description="`[topics.<name>.payload]`: the `[payload]` keys this topic reads differently, merged over "
        "`[payload]` at load. A topic of another format keeps only the keys every format has from the default "
        "(`max_value_bytes`, `allow_null_value`, `key_format`, `registry`). Topics sharing a table share its payload.",
    )


@dataclass(frozen=True)
class Route:
    """One destination: its topics, its main table, how their values are read (`SharelakeConfig.routes`).

    A table named in the catalog (`location.name`) has its path once `SharelakeConfig.locate_tables`
    ran, at the job's start."""

    topics: tuple[str, ...]
    location: TableLocation
    payload: FormatSettings
    key: str  # the config key naming its table, for error lines
    layout: TableLayout = field(default_factory=TableLayout)  # asked for (empty: the table keeps its own)
    layout_key: str = "delta"  # the section holding the layout keys, for error lines
    write: WriteConfig = field(default_factory=WriteConfig)  # appended, or upserted by key
    write_key: str = "write"  # the section holding the write keys, for error lines


def _one_table(section: str, path: str | None, name: str | None, required: bool = True) -> None:
    if path is not None and name is not None:
        raise ValueError(f"{section}.table_path and {section}.table_name both name the table: keep one")
    if required and path is None and name is None:
        raise ValueError(f"{section} needs table_path (a path) or table_name (a catalog name, db.table)")


def _location(path: str | None, name: str | None, main: TableLocation | None = None) -> TableLocation:
    """The table a `table_path` / `table_name` pair names (the checks above passed); neither: the
    dead-letter table of `main`."""
    if path is not None:
        return TableLocation.at(path)
    if name is not None:
        return TableLocation.named(name)
    assert main is not None, "a table needs a path or a name"
    return main.dead_letter()


def kept_tombstones(payload: FormatSettings, write: WriteConfig, section: str = "write") -> FormatSettings:
    """The payload keys a table's records are read with: an upsert that deletes on tombstones (as
    every upsert of Debezium events does) keeps records without a value (`allow_null_value`),
    whatever `[payload]` says. Debezium events are upserted, never appended."""
    debezium = payload.envelope == "debezium"
    if debezium and write.mode != "upsert":
        raise ValueError(
            f'payload.envelope = "debezium" upserts change events by key: set {section}.mode = "upsert" and '
            f"{section}.keys (the table's key columns)"
        )
    if (write.delete_on_tombstone or debezium) and not payload.allow_null_value:
        return payload.model_copy(update={"allow_null_value": True})
    return payload


def _merge_payload(default: Any, override: Any) -> Any:
    """A topic's `payload` keys over the default [payload]: a topic of another format keeps only the
    keys every format shares (max_value_bytes, allow_null_value) from the default."""
    if not isinstance(default, dict) or not isinstance(override, dict):
        return override
    fmt = override.get("format", default.get("format", "raw"))
    if fmt != default.get("format", "raw"):
        default = {k: v for k, v in default.items() if k in FormatSettings.model_fields and k != "format"}
    return {**default, **override}


class SharelakeConfig(_Section):
    """A Sharelake config file: one section per model below."""

    kafka: KafkaConfig
    delta: DeltaConfig = DeltaConfig()
    pump: PumpConfig = PumpConfig()
    batch: BatchConfig = BatchConfig()
    run: RunConfig = RunConfig()
    payload: PayloadSettings = RawSettings()  # the format's own section (app.formats)
    write: WriteConfig = WriteConfig()
    dead_letter: DeadLetterConfig = DeadLetterConfig()
    metrics: MetricsConfig = MetricsConfig()
    maintenance: MaintenanceConfig = MaintenanceConfig()
    topics: dict[str, TopicRoute] = Field(
        default_factory=dict,
        description="Routed mode (`kafka.topics`): one `[topics.<name>]` section per topic (`docs/routing.md`).",
    )
    spark_conf: dict[str, str] = Field(
        default_factory=dict,
        description="Spark settings the job's session starts with (object stores, credentials providers, "
        'catalogs), by their dotted names: `"spark.hadoop.fs.s3a.endpoint" = "..."` or '
        "`--set spark_conf.spark.hadoop.fs.s3a.endpoint=...`. A value `env:NAME` / `file:/path` is read at start: "
        "keys and secrets never on the command line (`docs/storage.md`).",
    )
    _routes: list[Route] = PrivateAttr(default_factory=list)
    _dead_letter_table: TableLocation = PrivateAttr(default=TableLocation(""))

    @model_validator(mode="before")
    @classmethod
    def _topic_payloads(cls, data: Any) -> Any:
        """Each [topics.<name>] section's payload: the default [payload] with the topic's own keys over it."""
        if not isinstance(data, dict) or not isinstance(data.get("topics"), dict):
            return data
        default = data.get("payload", {})
        topics = {}
        for name, route in data["topics"].items():
            if isinstance(route, dict):
                route = {**route, "payload": _merge_payload(default, route.get("payload", {}))}
            topics[name] = route
        return {**data, "topics": topics}

    @field_validator("spark_conf", mode="before")
    @classmethod
    def _spark_names(cls, v: Any) -> Any:
        """Dotted names flattened; TOML's booleans and numbers as Spark writes them (`true`, `4`)."""
        flat = flatten_dotted(v)
        if not isinstance(flat, dict):
            return flat
        return {
            k: str(x).lower() if isinstance(x, bool) else str(x) if isinstance(x, int | float) else x
            for k, x in flat.items()
        }

    @field_validator("spark_conf")
    @classmethod
    def _spark_keys(cls, v: dict[str, str]) -> dict[str, str]:
        odd = [k for k in v if not k.startswith("spark.")]
        if odd:
            raise ValueError(f"spark_conf.{odd[0]} is not a Spark setting: Spark's keys start with 'spark.'")
        return {k: resolve_secret(f"spark_conf.{k}", x) for k, x in v.items()}

    @model_validator(mode="after")
    def _routed(self) -> SharelakeConfig:
        _one_table("dead_letter", self.dead_letter.table_path, self.dead_letter.table_name, required=False)
        if self.kafka.topic is not None:
            if self.delta.table_path is None and self.delta.table_name is None:
                raise ValueError(
                    "kafka.topic needs delta.table_path (a path) or delta.table_name (a catalog name): "
                    "the table its records land in"
                )
            _one_table("delta", self.delta.table_path, self.delta.table_name)
            if self.topics:
                raise ValueError("[topics.<name>] sections route kafka.topics; with kafka.topic use delta.table_path")
            key = "delta.table_path" if self.delta.table_name is None else "delta.table_name"
            where = _location(self.delta.table_path, self.delta.table_name)  # a name's path comes at start
            payload = kept_tombstones(self.payload, self.write)
            self._routes = [Route((self.kafka.topic,), where, payload, key, self.delta.layout(), write=self.write)]
            self._dead_letter_table = _location(self.dead_letter.table_path, self.dead_letter.table_name, where)
            return self
        subscribed = self.kafka.subscribed
        unrouted = [t for t in subscribed if t not in self.topics]
        if unrouted:
            raise ValueError(
                f"kafka.topics subscribes to {', '.join(unrouted)}, which no [topics.<name>] section routes: "
                f"add [topics.{unrouted[0]}] with its table_path, or drop the topic from kafka.topics"
            )
        stray = [t for t in self.topics if t not in subscribed]
        if stray:
            raise ValueError(f"[topics.{stray[0]}] routes a topic kafka.topics does not list: add it there or drop it")
        if self.delta.table_path is not None or self.delta.table_name is not None:
            raise ValueError("delta.table_path is for kafka.topic; routed topics name theirs in [topics.<name>]")
        if self.dead_letter.table_path is None and self.dead_letter.table_name is None:
            raise ValueError(
                "kafka.topics needs dead_letter.table_path (or dead_letter.table_name): the one dead-letter "
                "table all topics share"
            )
        by_table: dict[TableLocation, list[str]] = {}
        for topic in subscribed:
            route = self.topics[topic]
            _one_table(f"topics.{topic}", route.table_path, route.table_name)
            by_table.setdefault(_location(route.table_path, route.table_name), []).append(topic)
        routes = []
        for table, names in by_table.items():
            payloads = [self.topics[t].payload for t in names]
            if any(p != payloads[0] for p in payloads):
                raise ValueError(
                    f"topics {', '.join(names)} share the table {table.path or f'name:{table.name}'} but read "
                    "their values differently: one payload per table"
                )
            layouts = {t: self.topics[t].layout() for t in names}
            chosen = {t: layout for t, layout in layouts.items() if layout.chosen}
            if len(set(chosen.values())) > 1:
                raise ValueError(
                    f"topics {', '.join(chosen)} share a table but ask for different layouts: give the layout "
                    "keys (partition_by, cluster_by, generated_columns) in one of their sections"
                )
            writes = {t: w for t in names if (w := self.topics[t].write) is not None}
            if writes and (len(writes) < len(names) or any(w != next(iter(writes.values())) for w in writes.values())):
                raise ValueError(
                    f"topics {', '.join(names)} share a table but not its [topics.<name>.write] keys: one write "
                    "mode per table; give every topic sharing it the same write section"
                )
            write, write_key = (
                (next(iter(writes.values())), f"topics.{names[0]}.write") if writes else (self.write, "write")
            )
            key = f"topics.{names[0]}.table_path" if table.name is None else f"topics.{names[0]}.table_name"
            payload = kept_tombstones(payloads[0], write, write_key)
            if chosen:  # the topic's own layout keys, else [delta]'s: the default of every routed table
                first = next(iter(chosen))
                layout, layout_key = chosen[first], f"topics.{first}"
            else:
                layout, layout_key = self.delta.layout(), "delta"
            routes.append(Route(tuple(names), table, payload, key, layout, layout_key, write, write_key))
        self._routes = routes
        self._dead_letter_table = _location(self.dead_letter.table_path, self.dead_letter.table_name)
        return self

    def routes(self) -> list[Route]:
        """One per destination table: its topics, the table, how the values are read."""
        return list(self._routes)

    @property
    def dead_letter_table(self) -> TableLocation:
        """The dead-letter table: given (by path or name), else the main table's path (or name) +
        `_dead_letter`; a named one has its path once `locate_tables` ran."""
        return self._dead_letter_table

    @property
    def dead_letter_key(self) -> str:
        return "dead_letter.table_path" if self._dead_letter_table.name is None else "dead_letter.table_name"

    def table_locations(self) -> list[TableLocation]:
        """Every table the job writes: the main tables, then the dead-letter table (located, after
        `locate_tables`, when a table is named)."""
        return [*(r.location for r in self._routes), self._dead_letter_table]

    def locate_tables(self, locate: Callable[[str, str], str]) -> None:
        """Give each table named in the catalog its path: `locate(name, config key)` (at start,
        with the session's catalog: app.sink.delta.catalog_tables.locate_table)."""

        def located(where: TableLocation, key: str) -> TableLocation:
            return where if where.name is None else where.located(locate(where.name, key))

        self._routes = [replace(r, location=located(r.location, r.key)) for r in self._routes]
        self._dead_letter_table = located(self._dead_letter_table, self.dead_letter_key)
