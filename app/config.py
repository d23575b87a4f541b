"""Job configuration: a TOML file from conf/ plus `--set section.key=value` overrides, validated.

Called by the jobs (`jobs/ingest.py`, `devkit/demo.py`) and the tests. Validation is pydantic's:
unknown keys, wrong types and missing required keys all fail. `load_config` turns the first
problem into a `ConfigError` whose one-line message names the key and the fix; the jobs print it
and exit with code 2. Every key is documented in `conf/local.toml`.
"""

from __future__ import annotations

import logging
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from app.error_lines import ConfigError
from app.secrets import is_secret_key, resolve_secret
from app.sink.formats import FORMATS, PayloadSettings
from app.sink.formats.base import FormatSettings
from app.sink.formats.raw import RawSettings

__all__ = ["ConfigError", "Route", "SharelakeConfig", "load_config"]


MAX_RECORD_LOCKS = 10_000  # Kafka's bound on share.partition.max.record.locks, whatever the broker allows


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KafkaConfig(_Section):
    bootstrap_servers: str
    # one topic into delta.table_path ...
    topic: str | None = None
    # ... or several, each routed by its [topics.<name>] section into its own table
    topics: list[str] | None = None
    group_id: str
    # "share" (default): a share group (KIP-932, brokers 4.2+): per-record acknowledgements, members
    # beyond the partition count. "consumer": a classic consumer group, offsets committed after the
    # Delta commit: order per partition, at most one member per partition, rebalances pause the group,
    # no per-record RELEASE. The same tables, dedup, dead letters and replay (README: Group types).
    group_type: Literal["share", "consumer"] = "share"
    # Set on the share group at start (IncrementalAlterConfigs on the GROUP resource).
    # The broker default is `latest`, which silently skips records produced before the group existed.
    auto_offset_reset: Literal["earliest", "latest", "unchanged"] = "earliest"
    # Set the group's share.record.lock.duration.ms at start; None leaves the group's value.
    record_lock_duration_ms: int | None = Field(default=None, ge=1000)
    # Set the group's share.partition.max.record.locks at start: how many records of one partition
    # may be in flight (acquired, undecided) at once. "max" (default) raises it to what the broker
    # allows (its group.share.max.partition.max.record.locks, at most Kafka's 10,000); a number sets
    # it; "unchanged" keeps the group's (2000 unless set). It bounds throughput: locks x partitions
    # per batch cycle.
    partition_max_record_locks: Annotated[int, Field(ge=100, le=MAX_RECORD_LOCKS)] | Literal["max", "unchanged"] = "max"
    # The share group's own dead-letter topic (KIP-1191, brokers 4.4 and later). Set, the job sets
    # the group's errors.deadletterqueue.topic.name at start, and the broker copies there each record
    # it archives: the delivery limit reached (also while no job runs) and each REJECT. The topic must
    # carry errors.deadletterqueue.group.enable=true (a missing one the job creates so) and start with
    # the broker's errors.deadletterqueue.topic.name.prefix (default "dlq."). Unset: the group's
    # setting is left as it is. Sharelake's dead-letter table stays the primary record (README).
    broker_dead_letter_topic: str | None = Field(default=None, min_length=1)
    # With it: also copy each record's key and value there (errors.deadletterqueue.copy.record.enable);
    # off, the broker writes its __dlq.errors.* headers alone.
    broker_dead_letter_copy_record: bool = True
    # Extra librdkafka settings for the share consumers (security.protocol, sasl.*, ...).
    client: dict[str, str | int | float | bool] = Field(default_factory=dict)

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
    members: int = Field(default=4, ge=1, le=64)  # members at start
    # elastic members: the pool grows and shrinks between these bounds from the measured buffer
    # fill and batch time (unset: both equal `members`, a fixed pool)
    min_members: int | None = Field(default=None, ge=1, le=64)
    max_members: int | None = Field(default=None, ge=1, le=64)
    max_poll_records: int = Field(default=5000, ge=1)
    poll_timeout_ms: int = Field(default=200, ge=10)
    # How a member sends a decided poll's acknowledgements: "sync" waits in commit_sync for the
    # broker's answer before polling again; "async" sends them with commit_async and polls at once,
    # the answers arriving in a later poll (README: Tuning, the failover measurements)
    acknowledgement_commit: Literal["sync", "async"] = "sync"
    buffer_max_records: int = Field(default=50_000, ge=1)

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
    max_records: int = Field(default=50_000, ge=1)
    max_wait_ms: int = Field(default=200, ge=0)
    # once a batch has its first poll, wait this long for the other members' polls (they land within
    # tens of milliseconds of each other): fewer, larger commits for at most this much latency
    linger_ms: int = Field(default=50, ge=0)
    # a failed Delta write RELEASEs its records and is retried with backoff; after this many
    # failures in a row the job fails (keep it below the group's delivery count limit, 5)
    write_attempts: int = Field(default=4, ge=1)


_INTERVAL = r"^interval \d+ (second|minute|hour|day|week)s?$"
_UNIT_S = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}
MIN_LOG_RETENTION_S = 600


def interval_s(interval: str) -> int:
    """Seconds in a Delta interval string of `_INTERVAL`'s form (`interval 7 days` -> 604800)."""
    _, count, unit = interval.split()
    return int(count) * _UNIT_S[unit.rstrip("s")]


class DeltaConfig(_Section):
    # the table of kafka.topic, by path or by catalog name (exactly one; routed topics name theirs in
    # [topics.<name>])
    table_path: str | None = None
    table_name: str | None = None
    # The trigger clock's streaming checkpoint. It holds only rate-source offsets, so by default
    # each run uses a fresh temporary one on the driver (replicas of a job never collide); set a
    # path to keep Spark's batch ids across restarts.
    checkpoint_path: str | None = None
    # how many recent commits the dedup cache loads at start (see docs/ARCHITECTURE.md)
    dedup_lookback_commits: int = Field(default=1000, ge=1)
    # Sharelake checkpoints a table every this many commits, in the background (Delta Kernel), then
    # deletes its expired log files. The tables Sharelake creates (main and dead-letter) get
    # delta.checkpointInterval = 10 x this, so Delta's own in-commit checkpoint only backstops.
    checkpoint_interval: int = Field(default=100, ge=1)
    # delta.logRetentionDuration of the tables Sharelake creates: how long commit files stay in
    # _delta_log (each append lists them: its cost grows with their number), hence how far back time
    # travel and a lagging downstream stream reader can go. The background checkpoints delete the
    # expired ones. Shorter than 7 days also sets delta.deletedFileRetentionDuration to it (Delta
    # requires log retention >= deleted-file retention). Default: VACUUM's, 7 days. At least 10 minutes.
    log_retention: str = Field(default="interval 7 days", pattern=_INTERVAL)
    # On S3 (no mutual exclusion for Delta commits) a job holds a writer lease on each table, renewed
    # every third of this; a second job finding it renewed stops at start, a restart after a crash
    # waits this long for the dead job's lease (app.sink.writer_lease)
    writer_lease_s: float = Field(default=30.0, ge=3.0)

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
    # the dead-letter Delta table, by path or by catalog name; default: the main table's + "_dead_letter"
    table_path: str | None = None
    table_name: str | None = None
    # a record delivered this many times is dead-lettered (class delivery_count_exceeded) instead of
    # tried again; keep it below the group's share.delivery.count.limit (default 5), where the broker
    # would archive the record without anyone seeing it (checked at start)
    max_delivery_count: int = Field(default=4, ge=1)


class MaintenanceConfig(_Section):
    """`jobs/maintain.py` (app.maintenance): OPTIMIZE, then VACUUM, every table of the config."""

    optimize: bool = True
    vacuum: bool = True
    # VACUUM keeps the files any version of the last this-many hours needs (time travel that far);
    # Delta refuses less than the table's delta.deletedFileRetentionDuration (7 days) unless told
    vacuum_retain_hours: float = Field(default=168.0, ge=0)
    # lite: delete what the log's remove actions name (fast; falls back to full when the log since
    # the last VACUUM was cleaned up); full: list the whole table folder (also finds stray files)
    vacuum_mode: Literal["lite", "full"] = "lite"


class MetricsConfig(_Section):
    # serve Prometheus metrics on this port (unset: off)
    prometheus_port: int | None = Field(default=None, ge=1, le=65535)
    prometheus_addr: str = "0.0.0.0"
    # with the endpoint on, a share group's lag per partition and its members are read through the
    # Kafka Java Admin every this many seconds (sharelake_group_lag, sharelake_group_members)
    lag_interval_s: float = Field(default=15.0, ge=1.0)
    # one log line per micro-batch (a StreamingQueryListener)
    progress_log: bool = True


class RunConfig(_Section):
    # continuous: until SIGTERM/SIGINT; until-drained (alias available-now): drain the backlog, exit 0
    mode: Literal["continuous", "until-drained", "available-now"] = "continuous"
    # until-drained: stop once records have arrived and none came for idle_timeout_ms ...
    idle_timeout_ms: int = Field(default=5000, ge=100)
    # ... or, when no record at all arrived, after empty_timeout_ms (the group join takes seconds)
    empty_timeout_ms: int = Field(default=30_000, ge=100)
    stop_timeout_s: float = Field(default=60.0, gt=0)
    app_name: str = "sharelake-ingest"


class TopicRoute(_Section):
    """`[topics.<name>]`: where one of kafka.topics lands, and how its values are read."""

    table_path: str | None = None
    table_name: str | None = None  # exactly one of the two
    # the [payload] keys this topic reads differently (merged over [payload] at load)
    payload: PayloadSettings = RawSettings()


@dataclass(frozen=True)
class Route:
    """One destination: its topics, its main table, how their values are read (`SharelakeConfig.routes`).

    A table named in the catalog (`table_name`) has its `table_path` (its location) once
    `SharelakeConfig.locate_tables` ran, at the job's start."""

    topics: tuple[str, ...]
    table_path: str
    payload: FormatSettings
    key: str  # the config key naming its table, for error lines
    table_name: str | None = None


def _one_table(section: str, path: str | None, name: str | None, required: bool = True) -> None:
    if path is not None and name is not None:
        raise ValueError(f"{section}.table_path and {section}.table_name both name the table: keep one")
    if required and path is None and name is None:
        raise ValueError(f"{section} needs table_path (a path) or table_name (a catalog name, db.table)")


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
    kafka: KafkaConfig
    delta: DeltaConfig = DeltaConfig()
    pump: PumpConfig = PumpConfig()
    batch: BatchConfig = BatchConfig()
    run: RunConfig = RunConfig()
    payload: PayloadSettings = RawSettings()  # the format's own section (app.sink.formats)
    dead_letter: DeadLetterConfig = DeadLetterConfig()
    metrics: MetricsConfig = MetricsConfig()
    maintenance: MaintenanceConfig = MaintenanceConfig()
    # routed mode (kafka.topics): one section per topic
    topics: dict[str, TopicRoute] = Field(default_factory=dict)
    # Spark settings the job's session starts with (object-store endpoints and credentials providers,
    # catalogs, ...): `"spark.hadoop.fs.s3a.endpoint" = "..."`; `env:` / `file:` values read at start
    spark_conf: dict[str, str] = Field(default_factory=dict)
    _routes: list[Route] = PrivateAttr(default_factory=list)
    _dead_letter_location: str | None = PrivateAttr(default=None)

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
            where = self.delta.table_path or ""  # a name's location comes at start (locate_tables)
            self._routes = [Route((self.kafka.topic,), where, self.payload, key, self.delta.table_name)]
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
        by_table: dict[str, list[str]] = {}
        for topic in subscribed:
            route = self.topics[topic]
            _one_table(f"topics.{topic}", route.table_path, route.table_name)
            by_table.setdefault(route.table_path or f"name:{route.table_name}", []).append(topic)
        routes = []
        for table, names in by_table.items():
            payloads = [self.topics[t].payload for t in names]
            if any(p != payloads[0] for p in payloads):
                raise ValueError(
                    f"topics {', '.join(names)} share the table {table} but read their values differently: "
                    "one payload per table"
                )
            first = self.topics[names[0]]
            if first.table_name is None:
                routes.append(Route(tuple(names), table, payloads[0], f"topics.{names[0]}.table_path"))
            else:
                routes.append(Route(tuple(names), "", payloads[0], f"topics.{names[0]}.table_name", first.table_name))
        self._routes = routes
        return self

    def routes(self) -> list[Route]:
        """One per destination table: its topics, the table, how the values are read."""
        return list(self._routes)

    @property
    def dead_letter_name(self) -> str | None:
        """The dead-letter table's catalog name, when it is addressed by name (given, or the main
        table's name + "_dead_letter")."""
        if self.dead_letter.table_path is not None:
            return None
        if self.dead_letter.table_name is not None:
            return self.dead_letter.table_name
        return None if self.delta.table_name is None else self.delta.table_name + "_dead_letter"

    @property
    def dead_letter_key(self) -> str:
        return "dead_letter.table_path" if self.dead_letter_name is None else "dead_letter.table_name"

    @property
    def dead_letter_path(self) -> str:
        """The dead-letter table's location (of a named one: once `locate_tables` ran)."""
        if self._dead_letter_location is not None:
            return self._dead_letter_location
        if self.dead_letter.table_path is not None:
            return self.dead_letter.table_path
        return str(self.delta.table_path).rstrip("/") + "_dead_letter"

    def table_locations(self) -> list[str]:
        """Every table the job writes: the main tables, then the dead-letter table (by location:
        after `locate_tables` when a table is named)."""
        return [*(r.table_path for r in self._routes), self.dead_letter_path]

    def locate_tables(self, locate: Callable[[str, str], str]) -> None:
        """Give each table named in the catalog its location: `locate(name, config key)` (at start,
        with the session's catalog: app.sink.catalog_tables.locate_table)."""
        self._routes = [
            r if r.table_name is None else replace(r, table_path=locate(r.table_name, r.key)) for r in self._routes
        ]
        if self.dead_letter_name is not None:
            self._dead_letter_location = locate(self.dead_letter_name, self.dead_letter_key)


# sections whose keys are another tool's dotted names (librdkafka's, Spark's): `--set` keeps the rest whole
FLAT_SECTIONS: tuple[tuple[str, ...], ...] = (("kafka", "client"), ("spark_conf",))


def parse_override(item: str) -> tuple[list[str], Any]:
    """`section.key=value` -> (["section", "key"], value); the value is read as TOML when it parses."""
    if "=" not in item:
        raise ConfigError(f"override {item!r}: write it as section.key=value, e.g. kafka.topic=events")
    dotted, raw = item.split("=", 1)
    path = [p for p in dotted.strip().split(".") if p]
    if not path:
        raise ConfigError(f"override {item!r}: the key is empty; write section.key=value")
    for section in FLAT_SECTIONS:  # their keys are dotted names (`fs.s3a.endpoint` beside `fs.s3a.endpoint.region`)
        if tuple(path[: len(section)]) == section and len(path) > len(section):
            path = [*section, ".".join(path[len(section) :])]
    try:
        value: Any = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return path, value


def merge_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    for item in overrides:
        path, value = parse_override(item)
        node = data
        for part in path[:-1]:
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"override {item!r}: {part} is a value, not a section")
            node = nxt
        node[path[-1]] = value
    return data


def _one_line(err: ValidationError) -> str:
    first = err.errors()[0]
    loc = [str(p) for p in first["loc"]]
    tag = next((i for i in range(1, len(loc)) if loc[i - 1] == "payload" and loc[i] in FORMATS), None)
    if tag is not None:  # the format's tag is how pydantic chose the section's model: not a key
        loc = [*loc[:tag], *loc[tag + 1 :]]
    key = ".".join(loc) or "(top level)"
    kind = first["type"]
    got = first.get("input")
    if kind == "missing":
        return f"config key {key} is required: add it to the config file or pass --set {key}=..."
    if kind == "union_tag_invalid":
        tag = first.get("ctx", {}).get("tag")
        return f"config key {key}.format = {tag!r}: not a payload format; use one of {', '.join(FORMATS)}"
    if kind == "extra_forbidden" and tag is not None:
        fmt = first["loc"][tag]
        return f"config key {key} does not apply to payload.format = {fmt!r}: remove it (see conf/local.toml)"
    if kind == "extra_forbidden":
        return f"config key {key} is not a known key: remove it or fix its spelling (see conf/local.toml)"
    if kind == "value_error" and not loc:  # a rule across sections: the message names the keys
        return str(first["msg"]).removeprefix("Value error, ")
    if kind == "value_error" and isinstance(got, dict):  # a section-level rule: the message names the keys
        return f"config key {key}: {first['msg'].removeprefix('Value error, ')}"
    if kind == "value_error" and first["msg"].startswith("Value error, " + key):  # the message names the key
        return first["msg"].removeprefix("Value error, ")
    shown = "<hidden>" if is_secret_key(key) else repr(got)
    return f"config key {key} = {shown}: {first['msg']}; fix the value (see conf/local.toml)"


def _switch_mode(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """An override of `kafka.topics` replaces the file's one-topic keys (`kafka.topic`,
    `delta.table_path` / `table_name`); one of `kafka.topic` replaces the file's routing
    (`kafka.topics`, [topics]); a table given by path replaces the file's by name, and back."""
    keys = {tuple(parse_override(item)[0][:2]) for item in overrides}
    for section in ("delta", "dead_letter"):
        table = data.get(section)
        for given, other in (("table_path", "table_name"), ("table_name", "table_path")):
            if isinstance(table, dict) and (section, given) in keys and (section, other) not in keys:
                table.pop(other, None)
    kafka, delta = data.get("kafka"), data.get("delta")
    if ("kafka", "topics") in keys and ("kafka", "topic") not in keys:
        if isinstance(kafka, dict):
            kafka.pop("topic", None)
        for key in ("table_path", "table_name"):
            if isinstance(delta, dict) and ("delta", key) not in keys:
                delta.pop(key, None)
    if ("kafka", "topic") in keys and ("kafka", "topics") not in keys:
        if isinstance(kafka, dict):
            kafka.pop("topics", None)
        data.pop("topics", None)
    return data


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> SharelakeConfig:
    """Read, merge and validate; raise `ConfigError` with one line on the first problem."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {p} does not exist: pass --config with a file from conf/")
        try:
            data = tomllib.loads(p.read_text())
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"config file {p} is not valid TOML: {e}") from None
    data = merge_overrides(_switch_mode(data, overrides or []), overrides or [])
    try:
        return SharelakeConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_one_line(e)) from None
