"""One ingest run, in named stages (`IngestRun`): open -> join -> warm -> loop -> close, each stage
taking the value the one before returned (`Opened`, `Joined`, `Warmed`, `Ended`); `sharelake check`
runs the open stage alone. The record's way through what the stages wire: group settings -> member
pool -> RecordBuffer -> clock query -> DeltaSink.

A run blocks until it ends: in `until-drained` mode when the backlog is drained, in `continuous`
mode when `stop_event` is set (SIGTERM/SIGINT in the job). It then stops gracefully: members stop
polling, the running micro-batch finishes and ACCEPTs, polls never written are RELEASEd, every
member commits and closes, and the streaming query stops. Before anything polls, `sharelake.run.preflight`
checks the broker, the topic, the share-group settings and the table paths (ConfigError on a
problem) and resolves the config's routes, each table named in the catalog located (`Opened.routes`:
what every later stage is given).

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
from contextlib import ExitStack
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from sharelake.acknowledge.window import DecisionWindow
from sharelake.bridge.clock_stream import ClockQuery, clock_session
from sharelake.bridge.record_buffer import RecordBuffer
from sharelake.config.routes import Route, Routes
from sharelake.config.settings import SharelakeConfig
from sharelake.consume.elastic import ElasticSizer
from sharelake.consume.group_state import GroupStateReader
from sharelake.consume.group_type import GroupType, TablePositions, table_positions
from sharelake.consume.group_types import group_type
from sharelake.consume.member_pool import MemberPool
from sharelake.failures.dependency_wait import waiting_out_outages
from sharelake.failures.errors import one_line
from sharelake.formats.base import FormatSettings
from sharelake.observe.counters import collect
from sharelake.observe.group_lag import GroupLag
from sharelake.observe.metrics import ProgressListener, serve_metrics
from sharelake.run.preflight import ClientErrors, KafkaFacts, check_start
from sharelake.sink.batch.delta_sink import DeltaSink
from sharelake.sink.batch.warm_up import warm_up
from sharelake.sink.dead_letter.factory import open_dead_letters
from sharelake.sink.dead_letter.sinks import DeadLetterSink
from sharelake.sink.dedup.dedup_table import DedupTable
from sharelake.sink.delta.writer_lease import WriterLease, hold_writer_leases, lease_checks
from sharelake.sink.write.destinations import Destination, open_destinations
from sharelake.sink.write.write_mode import WriteMode

log = logging.getLogger(__name__)


class RunSummary:
    """The run's counters (every owner's, declared in `sharelake.observe.counters`) and how long its parts took.

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
            if isinstance(value, dict):  # seconds per sink step: `<step>_s`; per `<x>step_s` step: `<x><step>_s`
                if name.endswith("_s"):  # else `<name>.<key>`
                    lead = name.removesuffix("step_s") if name.endswith("step_s") else ""
                    flat |= {f"{lead}{key}_s": v for key, v in value.items()}
                else:  # only the keys that counted something (dead letters per error class)
                    flat |= {f"{name}.{key}": v for key, v in value.items() if v}
            else:
                flat[name] = value
        return " ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in flat.items())


def route_note(route: Route, mode: WriteMode) -> str:
    """One destination for the banner: topics -> table, its write mode's note, payload (a registry's URL never
    holds credentials)."""
    return (
        f"{', '.join(route.topics)} -> table {route.location.describe()}{mode.note()}, "
        f"payload {payload_note(route.payload)}"
    )


def payload_note(p: FormatSettings) -> str:
    return p.describe()


def log_banner(cfg: SharelakeConfig, o: Opened, pool: MemberPool) -> None:
    """One block at start: versions, what is read, where it goes, and how."""
    pump, facts, group = cfg.pump, o.facts, o.group
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
        Path(__file__).parent.parent,  # the package
        version("pyspark"),
        version("delta-spark"),
        confluent_kafka.version(),
        confluent_kafka.libversion()[0],
        ("topic " if len(cfg.kafka.subscribed) == 1 else "topics ") + ", ".join(cfg.kafka.subscribed),
        facts.partitions,
        group.describe(cfg.kafka, facts.group_settings, facts.broker_lock_cap),
        "\n  ".join(route_note(r, d.mode) for r, d in zip(o.routes.main, o.destinations, strict=True)),
        o.dead_letters.describe(),
        cfg.run.mode,
        sized,
        pump.max_poll_records,
        cfg.batch.max_records,
    )


class IngestError(RuntimeError):
    """The run could not go on (a member or the streaming query failed)."""


QUERY_READY_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Opened:
    """What the open stage found and opened: the broker's facts, the group, the routes (each table
    located), the tables and their leases."""

    facts: KafkaFacts
    group: GroupType
    routes: Routes
    destinations: list[Destination]
    dead_letters: DeadLetterSink  # where the records that cannot land go (`dead_letter.sink`)
    leases: list[WriterLease]
    positions: TablePositions  # (topic, partition) -> the next offset the tables want
    window: DecisionWindow  # how long a poll may wait for its decisions: the group type's

    @property
    def tables(self) -> list[DedupTable]:
        return [*(d.table for d in self.destinations), *self.dead_letters.tables()]


@dataclass(frozen=True)
class Joined:
    """What the join stage built on `opened`: the member pool (its members joining the group), the sink
    they feed through the buffer, and the clock query that will run it."""

    opened: Opened
    pool: MemberPool
    sink: DeltaSink
    clock: ClockQuery
    job_name: str

    def counters(self) -> list[Any]:
        """The run's counters: the members', the sink's, each table's (`sharelake.observe.counters` collects them)."""
        return [*self.pool.member_stats(), self.sink.stats, *(t.stats for t in self.opened.tables)]

    def owners(self) -> list[Any]:
        """Every counter and gauge of the run, for the progress line and Prometheus."""
        return [*self.counters(), self.pool.gauges()]


@dataclass(frozen=True)
class Warmed:
    """What the warm stage left running: the clock query, past its first micro-batch."""

    joined: Joined
    query: StreamingQuery
    warm_up_s: float


@dataclass(frozen=True)
class Ended:
    """How the loop stage ended: the error that ended it (None: drained or stopped), when the members
    started."""

    warmed: Warmed
    error: BaseException | None
    members_at: float


@dataclass(frozen=True)
class Finished:
    """A whole run: what it opened (its routes: where it wrote) and its summary."""

    opened: Opened
    summary: RunSummary


class IngestRun:
    """One ingest run, in named stages, each taking the value the one before returned (`run()` takes
    them in order):

    - `open() -> Opened`: the start-up checks (`sharelake.run.preflight`: ConfigError, one line, exit 2),
      every payload format started, the tables opened with their dedup caches loaded, the writer
      leases held (S3). `sharelake check` runs this stage alone, with `apply=False`: nothing changed
      on the broker, no lease taken.
    - `join(Opened) -> Joined`: the buffer, the member pool and the sink built; the members join the
      group (they acquire nothing before they poll); the metrics, the lag reader and the progress
      log start.
    - `warm(Joined) -> Warmed`: older writers' leftover duplicates repaired, the write path warmed up
      (`sharelake.sink.batch.warm_up`), the clock query started and its first micro-batch run, all before
      any record is locked.
    - `loop(Warmed) -> Ended`: the members poll; the main thread watches the query and the members,
      ticks the elastic sizer, and ends the run when drained (`until-drained`) or on `stop_event`.
    - `close()`: everything the stages opened closed once, in reverse (one `ExitStack`): the members
      stop (the running batch finishes and ACCEPTs, unwritten polls are RELEASEd), the sink stops
      writing, the query stops, the tables finish their post-commit work, the leases are released.
    """

    def __init__(
        self,
        spark: SparkSession,
        cfg: SharelakeConfig,
        stop_event: threading.Event | None = None,
        group: GroupType | None = None,
        on_pool_started: Callable[[MemberPool], None] | None = None,
    ):
        self.spark = spark
        self.cfg = cfg
        self.stop_event = stop_event or threading.Event()
        self._group = group or group_type(cfg.kafka)  # `kafka.group_type`'s, unless a caller (a test) built its own
        self._on_pool_started = on_pool_started
        self._closing = ExitStack()
        self._started = time.monotonic()

    # -- open ------------------------------------------------------------------------------------

    def open(self, apply: bool = True) -> Opened:
        """Checks, formats, tables, leases; raises ConfigError (one line) on the first problem, TableInUseError
        when another live job writes one of the tables (S3)."""
        cfg, spark = self.cfg, self.spark
        client_errors = ClientErrors()
        admin = AdminClient({**cfg.kafka.client_config(), "error_cb": client_errors})  # type: ignore[dict-item]
        group = self._group
        facts, routes = waiting_out_outages(
            lambda: check_start(spark, cfg, admin, group, client_errors, apply=apply), cfg.run.dependency_wait_s
        )
        leases = hold_writer_leases(spark, cfg, routes) if apply else []  # S3: one job per table, else TableInUseError
        for lease in leases:
            self._closing.callback(lease.release)
        # formats started (a bad schema or registry setting raises ConfigError here; a registry that is
        # down is waited for), caches loaded;
        # each table's writer checks its lease before every commit
        checks = lease_checks(leases)
        destinations = open_destinations(spark, cfg, routes, checks)
        for destination in destinations:
            self._closing.callback(destination.table.close)
        dead_letters = open_dead_letters(spark, cfg, routes, checks)  # `dead_letter.sink`
        for table in dead_letters.tables():
            self._closing.callback(table.close)
        tables = [*(d.table for d in destinations), *dead_letters.tables()]
        positions = table_positions(t.next_offsets() for t in tables)  # a consumer group starts there
        window = group.decision_window(cfg.kafka, facts.group_settings)
        return Opened(facts, group, routes, destinations, dead_letters, leases, positions, window)

    # -- join ------------------------------------------------------------------------------------

    def join(self, opened: Opened) -> Joined:
        """The pool, the sink and what observes them; the members join the group."""
        cfg = self.cfg
        lanes = [[d] for d in opened.destinations]  # each table its own lane: a slow one holds back no other
        buffer = RecordBuffer(cfg.pump.buffer_max_records, len(lanes))
        cap = opened.group.member_cap(opened.facts.partitions)
        topics = [[t for d in lane for t in d.topics] for lane in lanes]  # lane k of the pool, the buffer, the sink
        pool = MemberPool(cfg.kafka, cfg.pump, buffer, opened.group, cap, opened.positions, topics)
        log_banner(cfg, opened, pool)
        job_name = f"{cfg.run.app_name}/{cfg.kafka.group_id}@{socket.gethostname()}:{os.getpid()}"
        sink = DeltaSink(
            buffer,
            opened.destinations,
            opened.dead_letters,
            cfg.batch,
            cfg.dead_letter.max_delivery_count,
            opened.window,
            job_name,
            on_fatal=pool.stop_polling,
            on_pause=pool.pause_polling,
            on_resume=pool.resume_polling,
            counts_deliveries=opened.group.counts_deliveries,
            lanes=lanes,
            lane_members=pool.lane_members,
        )
        clock = ClockQuery(
            clock_session(self.spark, local_checkpoint=not cfg.delta.checkpoint_path),
            self._clock_checkpoint(),
            f"sharelake-{cfg.kafka.group_id}",
        )
        joined = Joined(opened, pool, sink, clock, job_name)
        self._observe(joined)
        self._closing.callback(stop_writing, joined, cfg.run.stop_timeout_s)  # closed first of all
        pool.join_group()  # the members join the group meanwhile; they acquire nothing before they poll
        return joined

    def _clock_checkpoint(self) -> str:
        """The clock query's checkpoint: the configured one, or a temporary folder removed at close."""
        if self.cfg.delta.checkpoint_path:
            return self.cfg.delta.checkpoint_path
        temp_checkpoint = tempfile.mkdtemp(prefix="sharelake-clock-")
        self._closing.callback(shutil.rmtree, temp_checkpoint, ignore_errors=True)
        # by URI: a bare path would resolve against fs.defaultFS (HDFS on YARN), where nothing
        # removes it and a stop's interrupt mid-write prints an HDFS streamer trace
        return Path(temp_checkpoint).as_uri()

    def _observe(self, joined: Joined) -> None:
        """The progress log, the group's lag and the Prometheus endpoint, each stopped at close."""
        cfg = self.cfg
        if cfg.metrics.progress_log:
            listener = ProgressListener(joined.clock.name, joined.owners, joined.sink.stats.batch_report)
            self._closing.callback(joined.clock.add_listener(listener))
            self._closing.callback(listener.close)
        if not cfg.metrics.prometheus_port:
            return
        group = joined.opened.group
        group_lag = GroupLag(  # on a timer
            lambda: GroupStateReader(group, cfg.kafka, self.spark), cfg.kafka.subscribed, cfg.metrics.lag_interval_s
        )
        group_lag.start()
        self._closing.callback(group_lag.stop)
        stop_metrics = serve_metrics(cfg.metrics.prometheus_port, cfg.metrics.prometheus_addr, joined.owners, group_lag)
        self._closing.callback(stop_metrics)

    # -- warm ------------------------------------------------------------------------------------

    def warm(self, joined: Joined) -> Warmed:
        """Repair, warm-up and the clock query's first micro-batch, before any record is locked."""
        joined.sink.repair_pending()  # duplicates a writer that died before repairing them left behind
        formats = [d.format for d in joined.opened.destinations]
        warm_up_s = warm_up(self.spark, formats, self.cfg.dead_letter.max_delivery_count, joined.job_name)
        try:
            query = joined.clock.start(joined.sink)
        except Exception as e:
            raise IngestError(f"the streaming query did not start: {one_line(e, 300)}") from e
        wait_for_first_trigger(query, QUERY_READY_TIMEOUT_S)
        return Warmed(joined, query, warm_up_s)

    # -- loop ------------------------------------------------------------------------------------

    def loop(self, warmed: Warmed) -> Ended:
        """The members poll until the run ends, with the error that ended it, if any."""
        joined = warmed.joined
        cfg, pool = self.cfg, joined.pool
        sizer = ElasticSizer(
            pool,
            pool.bounded(cfg.pump.lowest),
            pool.bounded(cfg.pump.highest),
            joined.opened.window,
            lambda: joined.sink.stats.last_cycle_s,
        )
        pool.start()
        members_at = time.monotonic()
        log.info(
            "%s members started: %d (start-up took %.1fs, warm-up %.1fs)",
            joined.opened.group.noun,
            pool.size,
            members_at - self._started,
            warmed.warm_up_s,
        )
        if self._on_pool_started is not None:
            self._on_pool_started(pool)
        while not self.stop_event.is_set():
            ended = self._ended(warmed, members_at)
            if ended is not None:
                return ended
            sizer.tick()
            time.sleep(0.1)
        return Ended(warmed, None, members_at)

    def _ended(self, warmed: Warmed, members_at: float) -> Ended | None:
        """The run's end when it ends now (its error, or drained); None while it goes on."""
        cfg, query, sink, pool = self.cfg, warmed.query, warmed.joined.sink, warmed.joined.pool
        if sink.config_error is not None:  # found by a batch (a key column the registry's schemas lack)
            return Ended(warmed, sink.config_error, members_at)
        if query.exception() is not None:
            log.warning("the streaming query failed; its error in full: %s", query.exception())
            return Ended(warmed, IngestError(f"streaming query failed: {one_line(query.exception())}"), members_at)
        if pool.failures():
            noun = warmed.joined.opened.group.noun
            return Ended(warmed, IngestError(f"{noun} member failed: {pool.failures()[0]!r}"), members_at)
        drain_mode = cfg.run.mode in ("until-drained", "available-now")
        if drain_mode and pool.drained(cfg.run.idle_timeout_ms / 1000, cfg.run.empty_timeout_ms / 1000):
            log.info("backlog drained: quiet for the idle timeout and nothing in flight")
            return Ended(warmed, None, members_at)
        return None

    # -- close -----------------------------------------------------------------------------------

    def close(self) -> None:
        """Everything the stages opened, closed once, in reverse."""
        self._closing.close()

    def summary(self, ended: Ended) -> RunSummary:
        """The run's counters and how long its parts took (after close)."""
        joined = ended.warmed.joined
        pool, st, destinations = joined.pool, joined.sink.stats, joined.opened.destinations
        members_at = ended.members_at
        t = pool.totals()
        last_commit = max((d.table.stats.last_commit_at or members_at for d in destinations), default=members_at)
        first = t.first_record_at or members_at
        return RunSummary(
            collect(joined.counters()),
            {
                "mean_cycle_s": st.cycle_s_sum / max(1, st.cycles),
                "start_s": members_at - self._started,  # checks, caches, the warm-up, the clock's first batch
                "first_record_s": first - self._started,  # the group join ends there
                "ingest_s": max(0.0, last_commit - first),  # first record -> last commit
                "seconds": time.monotonic() - self._started,
            },
        )

    def run(self) -> Finished:
        """open, join, warm, loop, close; raises the error that ended the run (IngestError, ConfigError)."""
        with self._closing:
            opened = self.open()
            ended = self.loop(self.warm(self.join(opened)))
        if ended.error is not None:
            raise ended.error
        return Finished(opened, self.summary(ended))


def stop_writing(joined: Joined, stop_timeout_s: float) -> None:
    """The members stop (the running batch finishes), then the sink, then the query; the last commit's
    post-commit work ends."""
    joined.pool.stop(stop_timeout_s)
    joined.sink.close()
    joined.clock.stop()
    joined.sink.finish()


def wait_for_first_trigger(query: StreamingQuery, timeout_s: float) -> None:
    """Until the clock query has run one micro-batch (its start-up is then paid), or failed, or the timeout."""
    deadline = time.monotonic() + timeout_s
    while query.lastProgress is None and query.isActive and time.monotonic() < deadline:
        time.sleep(0.05)


def run_ingest(
    spark: SparkSession,
    cfg: SharelakeConfig,
    stop_event: threading.Event | None = None,
    group: GroupType | None = None,
    on_pool_started: Callable[[MemberPool], None] | None = None,
) -> RunSummary:
    """One run (`IngestRun.run`); `group`: the group type when not the one `kafka.group_type` names (a test's, its
    consumers provoking faults); `on_pool_started` lets a caller (a test) steer the member pool while it runs."""
    return IngestRun(spark, cfg, stop_event, group, on_pool_started).run().summary
