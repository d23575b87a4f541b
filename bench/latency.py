"""The latency phase: Sharelake, then Spark's Kafka source as the anchor, each running continuously
under the same fixed offered load on a fresh topic of its own, then stopped with SIGTERM.

For each contender it creates the topic
`bench-latency-<contender>-p<partitions>`, starts the job (Sharelake: `run.mode=continuous`;
Spark: `bench/spark_jobs/kafka_source_continuous.py`, Trigger.ProcessingTime(`latency_trigger`)),
waits until the job is up (Sharelake: its start-up checks passed; Spark: the SparkSession is up),
and produces `latency_rate` records/s in a background thread. The first records are a warm-up,
left out of the figures by record id: they last `latency_warmup_seconds` and at least until the
job's first Delta commit (the group join and Spark's cold first batches). The next
`latency_seconds` of records are the measured ones. Then the producer stops, the phase waits until
every record is in the table and sends SIGTERM (Sharelake: to the spark-submit JVM, whose hook
drains the job gracefully, exit 143; Spark: to the job's process group). The latency figures are
computed from the tables afterwards, the same way for both (`bench.verify.table_latency`).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.contenders import sharelake, spark_kafka_source
from bench.contenders.base import RunContext, RunResult, failed, tail, wait_until
from bench.settings import BenchSettings
from devkit.delta_log import data_commits, read_commits, rows_in
from devkit.ingest_job import JSON_PAYLOAD
from devkit.paths import PROJECT_ROOT
from devkit.workload import RateProducer, record_value
from sharelake.testing.kafka_broker import EmbeddedKafka

log = logging.getLogger(__name__)

CONTENDERS = (sharelake.NAME, sharelake.BEFORE, spark_kafka_source.NAME)  # the order they run in
SHARELAKE_READY = "share group "  # logged by run_ingest after the start-up checks, before the query starts
READY_TIMEOUT_S = 240.0
LAND_TIMEOUT_S = 180.0


@dataclass
class LatencyRun:
    result: RunResult
    topic: str
    warmup_records: int  # ids below this are the warm-up
    produced: int
    producer_lag_s: float  # how far the producer fell behind its schedule at most

    @property
    def contender(self) -> str:
        return self.result.contender

    @property
    def measured(self) -> int:
        return self.produced - self.warmup_records


@dataclass
class _Job:
    """What the phase needs of a started job, whichever contender it is."""

    proc: subprocess.Popen[bytes]
    log: Path
    table: Path
    ready_line: str  # the job's log holds this once it is ready for records
    stop: Callable[[], int]  # SIGTERM, wait; the exit code
    kill: Callable[[], None]
    result: Callable[[int], RunResult]  # from the exit code, once stopped


def _start_sharelake(
    ctx: RunContext,
    payload: tuple[str, ...] = JSON_PAYLOAD,
    extra_sets: tuple[str, ...] = (),
    root: Path = PROJECT_ROOT,
    name: str = sharelake.NAME,
) -> _Job:
    job = sharelake.start_sharelake(ctx, "continuous", extra_sets, payload=payload, root=root)

    def stop() -> int:
        if job.proc.poll() is None:
            os.kill(job.proc.pid, signal.SIGTERM)  # the spark-submit JVM: its hook drains the job gracefully
        return job.wait(ctx.settings.run_timeout_s)

    def result(code: int) -> RunResult:
        return sharelake.result_of(ctx, job, code, expect_exit=(0, 143), name=name)

    return _Job(job.proc, job.log, job.table, SHARELAKE_READY, stop, job.kill, result)


def _start_spark(ctx: RunContext) -> _Job:
    job = spark_kafka_source.start_continuous(ctx)
    return _Job(job.proc, job.log, job.table, spark_kafka_source.READY_LINE, job.stop, job.kill, job.result)


STARTERS: dict[str, Callable[[RunContext], _Job]] = {
    sharelake.NAME: _start_sharelake,
    sharelake.BEFORE: lambda ctx: _start_sharelake(
        ctx, extra_sets=ctx.settings.before_sets, root=ctx.settings.before_root or PROJECT_ROOT, name=sharelake.BEFORE
    ),
    spark_kafka_source.NAME: _start_spark,
}


def _measure(
    job: _Job, producer: RateProducer, s: BenchSettings, caught_up: Callable[[], bool] | None = None
) -> tuple[int, str]:
    """Warm up, then produce the measured part; (first measured id, error or ""). With `caught_up`
    the warm-up also lasts until it holds (the backlog of the job's start is decided)."""
    started = time.monotonic()

    def alive() -> bool:
        return job.proc.poll() is None and producer.is_alive()

    def warmed_up() -> bool:
        return (
            time.monotonic() - started >= s.latency_warmup_seconds
            and bool(data_commits(read_commits(job.table)))
            and (caught_up is None or caught_up())
        )

    if not wait_until(warmed_up, alive, READY_TIMEOUT_S):
        what = "no Delta commit" if not data_commits(read_commits(job.table)) else "the job never caught up"
        return 0, f"{what} during the warm-up: {producer.failure!r} {tail(job.log, 8)}"
    first_measured = producer.sent
    time.sleep(s.latency_seconds)
    return first_measured, "" if alive() else f"stopped during the load: {producer.failure!r} {tail(job.log, 8)}"


def run_latency(
    kafka: EmbeddedKafka,
    s: BenchSettings,
    run_dir: Path,
    contender: str,
    topic: str | None = None,
    *,
    value_of: Callable[[int], bytes] = record_value,
    payload: tuple[str, ...] | None = None,
    decided: Callable[[Path], int] | None = None,
    catch_up_s: float | None = None,
) -> LatencyRun:
    """One contender under the offered load on a fresh topic (`topic`, default named after the
    contender); never raises for a failed run.

    `value_of(i)` is record i's value (default: the workload's JSON); `payload` Sharelake's payload
    settings for it (default: the workload's JSON schema; Sharelake only); `decided(table)` how many
    records the job has decided (default: the table's rows; a load with bad records adds the
    dead-letter table's). `catch_up_s`: the warm-up also lasts until fewer than this many seconds of
    load are undecided, so that the measured part does not start with the backlog of a slow start."""
    topic = topic or f"bench-latency-{contender}-p{s.latency_partitions}"
    kafka.create_topic(topic, partitions=s.latency_partitions)
    ctx = RunContext(kafka.bootstrap, topic, s.latency_partitions, 0, s.members, run_dir, s, phase="latency")
    if payload is not None and contender != sharelake.NAME:
        raise ValueError(f"payload settings are Sharelake's, not {contender}'s")
    try:
        job = _start_sharelake(ctx, payload) if payload is not None else STARTERS[contender](ctx)
    except Exception as e:  # e.g. the Kafka source jars are missing
        log.exception("latency: %s did not start", contender)
        return LatencyRun(failed(ctx, contender, f"did not start: {e!r}"), topic, 0, 0, 0.0)
    producer = RateProducer(kafka.bootstrap, topic, s.latency_rate, s.producer_batch_bytes, value_of=value_of)

    def job_alive() -> bool:
        return job.proc.poll() is None

    def job_ready() -> bool:
        return job.log.exists() and job.ready_line in job.log.read_text(errors="replace")

    def decided_now() -> int:
        return decided(job.table) if decided is not None else rows_in(read_commits(job.table))

    def all_landed() -> bool:
        return decided_now() >= producer.stats.records

    def caught_up() -> bool:
        return decided_now() >= producer.sent - s.latency_rate * (catch_up_s or 0.0)

    try:
        if not wait_until(job_ready, job_alive, READY_TIMEOUT_S):
            job.kill()
            return LatencyRun(
                failed(ctx, contender, f"the job did not start: {tail(job.log, 8)}", job.log), topic, 0, 0, 0
            )
        producer.start()
        first_measured, error = _measure(job, producer, s, caught_up if catch_up_s is not None else None)
        producer.stop()
        producer.join(timeout=90)
        if error:
            job.kill()
            result = failed(ctx, contender, error, job.log)
            return LatencyRun(result, topic, first_measured, producer.sent, producer.lag_s)
        if not wait_until(all_landed, job_alive, LAND_TIMEOUT_S):
            log.warning("latency: %s has not landed every record after %.0fs", contender, LAND_TIMEOUT_S)
        code = job.stop()
    except BaseException:
        producer.stop()
        job.kill()
        raise
    result = job.result(code)
    result.expected = producer.stats.records
    return LatencyRun(result, topic, first_measured, producer.stats.records, producer.lag_s)


def run_latency_phase(kafka: EmbeddedKafka, s: BenchSettings, run_dir: Path) -> list[LatencyRun]:
    """Every latency contender among `s.contenders`, one after the other (Sharelake first); none when
    `s.latency_seconds` is 0."""
    runs: list[LatencyRun] = []
    if s.latency_seconds <= 0:
        return runs
    for name in (c for c in CONTENDERS if c in s.contenders):
        log.info(
            "latency: %s at %d records/s on %d partition(s) for %gs (+%gs warm-up)",
            name, s.latency_rate, s.latency_partitions, s.latency_seconds, s.latency_warmup_seconds,
        )  # fmt: skip
        run = run_latency(kafka, s, run_dir / name, name)
        r = run.result
        log.info(
            "  -> %s",
            f"{run.produced:,} records produced, {r.records:,} in the table" if r.ok else f"FAILED: {r.error[:300]}",
        )
        runs.append(run)
    return runs
