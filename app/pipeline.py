"""Wires one ingest run: group settings -> member pool -> RecordBuffer -> clock query -> DeltaSink.

Called by `sharelake ingest` (`app.commands.ingest`) and by the tests in-process. `run_ingest` blocks until
the run ends: in `until-drained` mode when the backlog is drained, in `continuous` mode when
`stop_event` is set (SIGTERM/SIGINT in the job). It then stops gracefully: members stop polling,
the running micro-batch finishes and ACCEPTs, polls never written are RELEASEd, every member
commits and closes, and the streaming query stops. Before anything polls, `app.preflight` checks
the broker, the topic, the share-group settings and the table path (ConfigError on a problem).

"Drained" is `MemberPool.drained`: every member has been polling and getting nothing for the
idle timeout, and no polled record is still undecided.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka import ShareConsumer
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from app.bridge.clock_stream import clock_session, clock_stream
from app.bridge.record_buffer import RecordBuffer
from app.config import Route, SharelakeConfig
from app.consume.elastic import ElasticSizer
from app.consume.group_client import GroupType, group_type
from app.consume.member_pool import MemberPool
from app.consume.share_group import ShareConsumerFactory
from app.counters import collect
from app.error_lines import one_line
from app.group_lag import GroupLag
from app.metrics import ProgressListener, serve_metrics
from app.preflight import ClientErrors, KafkaFacts, check_start
from app.sink.dead_letter_sink import DeltaDeadLetters
from app.sink.delta_sink import DeltaSink
from app.sink.destinations import open_destinations
from app.sink.formats.avro import AvroSettings
from app.sink.formats.base import FormatSettings
from app.sink.formats.protobuf import ProtobufSettings
from app.sink.warm_up import warm_up
from app.sink.writer_lease import hold_writer_leases, lease_checks

log = logging.getLogger(__name__)


DEFAULT_LOCK_MS = 30_000  # the broker's group.share.record.lock.duration.ms default


class RunSummary:
    """The run's counters (every owner's, declared in `app.counters`) and how long its parts took.

    Read as attributes (`summary.accepted`, `summary.phase_s["write"]`); `line()` is the job's
    `run ended:` line.
    """

    def __init__(self, counters: dict[str, Any], timings: dict[str, float]):
        self._values = {**counters, **timings}

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None

    def __repr__(self) -> str:
        return f"RunSummary({self.line()})"

    def line(self) -> str:
        flat: dict[str, Any] = {}
        for name, value in self._values.items():
            if isinstance(value, dict):  # seconds per sink step: `<step>_s`; else `<name>.<key>`
                if name.endswith("_s"):
                    flat |= {f"{key}_s": v for key, v in value.items()}
                else:  # only the keys that counted something (dead letters per error class)
                    flat |= {f"{name}.{key}": v for key, v in value.items() if v}
            else:
                flat[name] = value
        return " ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in flat.items())


def route_note(route: Route) -> str:
    """One destination for the banner: topics -> table, payload (a registry's URL never holds credentials)."""
    return f"{', '.join(route.topics)} -> table {route.location.describe()}, payload {payload_note(route.payload)}"


def payload_note(p: FormatSettings) -> str:
    registry = ""
    if p.registry is not None:
        registry = f"registry {p.registry.url}{' (basic auth)' if p.registry.basic_auth_user else ''}"
    note = p.format
    if isinstance(p, AvroSettings):
        note = f"avro, writer schemas from {registry or 'payload.avro_schema'}"
    if isinstance(p, ProtobufSettings):
        note = f"protobuf, writer schemas from {registry}"
    if p.key_format != "raw":
        keys = f"{p.key_format} keys"
        note += f", {keys}" + (f" (schemas from {registry})" if p.key_format == "avro" and p.format != "avro" else "")
    return note


def log_banner(cfg: SharelakeConfig, facts: KafkaFacts, group: GroupType, lock_ms: int, pool: MemberPool) -> None:
    """One block at start: versions, what is read, where it goes, and how."""
    pump = cfg.pump
    members = pool.size
    sized = (
        f"{members}"
        if pump.lowest == pump.highest
        else f"{members} ({pool.bounded(pump.lowest)}..{pool.bounded(pump.highest)})"
    )
    if pool.cap is not None and pump.highest > pool.cap:
        sized += (
            f" (pump.members capped at the {pool.cap} partitions: a {group.noun} gives each partition to one member)"
        )
    log.info(
        "Sharelake %s starting (from %s): pyspark %s, delta-spark %s, confluent-kafka %s (librdkafka %s)\n"
        "  %s (%d partitions), %s\n"
        "  %s\n  dead letters %s\n"
        "  mode %s, members %s, max_poll_records %d, batch.max_records %d",
        version("sharelake"),
        Path(__file__).parent,
        version("pyspark"),
        version("delta-spark"),
        confluent_kafka.version(),
        confluent_kafka.libversion()[0],
        ("topic " if len(cfg.kafka.subscribed) == 1 else "topics ") + ", ".join(cfg.kafka.subscribed),
        facts.partitions,
        group.describe(cfg.kafka, facts.group_settings, facts.broker_lock_cap, lock_ms),
        "\n  ".join(route_note(r) for r in cfg.routes()),
        cfg.dead_letter_table.describe(),
        cfg.run.mode,
        sized,
        pump.max_poll_records,
        cfg.batch.max_records,
    )


class IngestError(RuntimeError):
    """The run could not go on (a member or the streaming query failed)."""


QUERY_READY_TIMEOUT_S = 120.0


def _wait_for_first_trigger(query: StreamingQuery, timeout_s: float) -> None:
    """Until the clock query has run one micro-batch (its start-up is then paid), or failed, or the timeout."""
    deadline = time.monotonic() + timeout_s
    while query.lastProgress is None and query.isActive and time.monotonic() < deadline:
        time.sleep(0.05)


def run_ingest(
    spark: SparkSession,
    cfg: SharelakeConfig,
    stop_event: threading.Event | None = None,
    consumer_factory: ShareConsumerFactory = ShareConsumer,
    on_pool_started: Callable[[MemberPool], None] | None = None,
) -> RunSummary:
    """One run; `on_pool_started` lets a caller (a test) steer the member pool while it runs."""
    stop_event = stop_event or threading.Event()
    started = time.monotonic()
    client_errors = ClientErrors()
    admin = AdminClient({**cfg.kafka.client_config(), "error_cb": client_errors})  # type: ignore[dict-item]
    positions: dict[tuple[str, int], int] = {}  # where the tables are: filled once they are opened, below
    group = group_type(cfg.kafka, consumer_factory, lambda topic, partition: positions.get((topic, partition)))
    facts = check_start(spark, cfg, admin, group, client_errors)  # raises ConfigError: one line, exit code 2
    group_settings = facts.group_settings
    leases = hold_writer_leases(spark, cfg)  # S3: one job per table, else ConfigError
    try:  # formats started (a bad schema or an unreachable registry raises ConfigError here), caches loaded
        destinations, dead = open_destinations(spark, cfg, lease_checks(leases))
    except BaseException:
        for lease in leases:
            lease.release()
        raise
    for table in (*(d.table for d in destinations), dead):
        for key, offset in table.next_offsets().items():
            positions[key] = max(positions.get(key, 0), offset)
    lock_ms = int(group_settings.get("share.record.lock.duration.ms") or DEFAULT_LOCK_MS)
    buffer = RecordBuffer(cfg.pump.buffer_max_records)
    pool = MemberPool(cfg.kafka, cfg.pump, buffer, group, group.member_cap(facts.partitions))
    log_banner(cfg, facts, group, lock_ms, pool)
    job_name = f"{cfg.run.app_name}/{cfg.kafka.group_id}@{socket.gethostname()}:{os.getpid()}"
    sink = DeltaSink(
        buffer,
        destinations,
        DeltaDeadLetters(dead),
        cfg.batch,
        cfg.dead_letter.max_delivery_count,
        lock_ms / 1000,
        job_name,
        on_fatal=pool.stop_polling,
        on_pause=pool.pause_polling,
        on_resume=pool.resume_polling,
    )
    pool.join_group()  # the members join the share group meanwhile; they acquire nothing before they poll
    query_name = f"sharelake-{cfg.kafka.group_id}"
    temp_checkpoint = None if cfg.delta.checkpoint_path else tempfile.mkdtemp(prefix="sharelake-clock-")
    clock = clock_session(spark, local_checkpoint=temp_checkpoint is not None)
    try:
        sink.repair_pending()  # duplicates a writer that died before repairing them left behind
        formats = [d.format for d in destinations]
        warm_up_s = warm_up(spark, formats, cfg.dead_letter.max_delivery_count, job_name)  # before any lock
        try:
            query = (
                clock_stream(clock)
                .writeStream.foreachBatch(sink)
                .option("checkpointLocation", cfg.delta.checkpoint_path or temp_checkpoint)
                .queryName(query_name)
                .start()
            )
        except Exception as e:
            raise IngestError(f"the streaming query did not start: {one_line(e, 300)}") from e
    except BaseException:
        pool.stop(cfg.run.stop_timeout_s)  # the members joined the group: leave it
        for lease in leases:
            lease.release()
        if temp_checkpoint:
            shutil.rmtree(temp_checkpoint, ignore_errors=True)
        raise

    tables = [*(d.table.stats for d in destinations), dead.stats]

    def owners() -> list[Any]:  # every counter of the run: app.counters collects them
        return [*pool.member_stats(), sink.stats, *tables, pool.gauges()]

    listener = ProgressListener(query_name, owners, sink.stats.batch_report) if cfg.metrics.progress_log else None
    if listener is not None:
        clock.streams.addListener(listener)
    group_lag = None
    if cfg.metrics.prometheus_port and cfg.kafka.group_type == "share":  # the group's lag, read on a timer
        subscribed = cfg.kafka.subscribed
        client = cfg.kafka.client_config()
        group_lag = GroupLag(spark, client, cfg.kafka.group_id, subscribed, cfg.metrics.lag_interval_s)
        group_lag.start()
    stop_metrics = (
        serve_metrics(
            cfg.metrics.prometheus_port, cfg.metrics.prometheus_addr, owners, *([group_lag] if group_lag else [])
        )
        if cfg.metrics.prometheus_port
        else None
    )
    sizer = ElasticSizer(
        pool,
        pool.bounded(cfg.pump.lowest),
        pool.bounded(cfg.pump.highest),
        lock_ms / 1000,
        lambda: sink.stats.last_cycle_s,
    )
    _wait_for_first_trigger(query, QUERY_READY_TIMEOUT_S)  # the clock's first micro-batch, before any lock
    pool.start()
    members_at = time.monotonic()
    log.info(
        "%s members started: %d (start-up took %.1fs, warm-up %.1fs)",
        group.noun,
        pool.size,
        members_at - started,
        warm_up_s,
    )
    if on_pool_started is not None:
        on_pool_started(pool)
    drain_mode = cfg.run.mode in ("until-drained", "available-now")
    error: BaseException | None = None
    try:
        while not stop_event.is_set():
            if query.exception() is not None:
                log.warning("the streaming query failed; its error in full: %s", query.exception())
                error = IngestError(f"streaming query failed: {one_line(query.exception())}")
                break
            if pool.failures():
                error = IngestError(f"share member failed: {pool.failures()[0]!r}")
                break
            if drain_mode and pool.drained(cfg.run.idle_timeout_ms / 1000, cfg.run.empty_timeout_ms / 1000):
                log.info("backlog drained: quiet for the idle timeout and nothing in flight")
                break
            sizer.tick()
            time.sleep(0.1)
    finally:
        pool.stop(cfg.run.stop_timeout_s)
        sink.close()
        query.stop()
        sink.finish()
        for lease in leases:
            lease.release()
        if listener is not None:
            clock.streams.removeListener(listener)
        if group_lag is not None:
            group_lag.stop()
        if stop_metrics is not None:
            stop_metrics()
        if temp_checkpoint:
            shutil.rmtree(temp_checkpoint, ignore_errors=True)
    t, st = pool.totals(), sink.stats
    last_commit = max((d.table.stats.last_commit_at or members_at for d in destinations), default=members_at)
    first = t.first_record_at or members_at
    summary = RunSummary(
        collect([*pool.member_stats(), st, *tables]),
        {
            "mean_cycle_s": st.cycle_s_sum / max(1, st.cycles),
            "start_s": members_at - started,  # checks, caches, the warm-up, the clock's first batch
            "first_record_s": first - started,  # the group join ends there
            "ingest_s": max(0.0, last_commit - first),  # first record -> last commit
            "seconds": time.monotonic() - started,
        },
    )
    if error is not None:
        raise error
    return summary
