"""The latency phase: Sharelake in continuous mode under a fixed offered load, then SIGTERM.

Called by `bench.run`. It starts the job on a fresh topic, waits until the job has passed its
start-up checks, and produces at `latency_rate` records/s in a background thread. The first
records are a warm-up, left out of the figures by record id: they last `latency_warmup_seconds`
and at least until the job's first Delta commit (the group join and Spark's cold first batches).
The next `latency_seconds` of records are the measured ones. Then it waits until every record is
in the table and sends SIGTERM to the spark-submit JVM (the job drains gracefully and exits 143).
The figures themselves are computed from the table afterwards (`bench.verify.sharelake_latency`).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.embedded.kafka_broker import EmbeddedKafka
from bench.contenders.base import RunContext, RunResult, failed, tail
from bench.contenders.sharelake import NAME, SharelakeJob, result_of, start_sharelake
from bench.delta_log import data_commits, read_commits, rows_in
from bench.settings import BenchSettings
from bench.workload import RateProducer

READY_LINE = "share group "  # logged by run_ingest after the start-up checks, before the query starts
READY_TIMEOUT_S = 240.0
LAND_TIMEOUT_S = 180.0


@dataclass
class LatencyRun:
    result: RunResult
    topic: str
    warmup_records: int  # ids below this are the warm-up
    produced: int
    producer_lag_s: float  # how far the producer fell behind its schedule at most


def _wait_for(done: Callable[[], bool], alive: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if done():
            return True
        if not alive():
            return False
        time.sleep(0.2)
    return False


def _measure(job: SharelakeJob, producer: RateProducer, s: BenchSettings) -> tuple[int, str]:
    """Warm up, then produce the measured part; (first measured id, error or "")."""
    started = time.monotonic()

    def alive() -> bool:
        return job.proc.poll() is None and producer.is_alive()

    def warmed_up() -> bool:
        return time.monotonic() - started >= s.latency_warmup_seconds and bool(data_commits(read_commits(job.table)))

    warm = _wait_for(warmed_up, alive, READY_TIMEOUT_S)
    if not warm:
        return 0, f"no Delta commit during the warm-up: {producer.failure!r} {tail(job.log, 8)}"
    first_measured = producer.sent
    time.sleep(s.latency_seconds)
    return first_measured, "" if alive() else f"stopped during the load: {producer.failure!r} {tail(job.log, 8)}"


def run_latency(kafka: EmbeddedKafka, s: BenchSettings, run_dir: Path) -> LatencyRun:
    topic = f"bench-latency-p{s.latency_partitions}"
    kafka.create_topic(topic, partitions=s.latency_partitions)
    ctx = RunContext(kafka.bootstrap, topic, s.latency_partitions, 0, s.members, run_dir, s, phase="latency")
    job = start_sharelake(ctx, "continuous")
    producer = RateProducer(kafka.bootstrap, topic, s.latency_rate, s.producer_batch_bytes)

    def job_alive() -> bool:
        return job.proc.poll() is None

    def job_ready() -> bool:
        return job.log.exists() and READY_LINE in job.log.read_text(errors="replace")

    def all_landed() -> bool:
        return rows_in(read_commits(job.table)) >= producer.stats.records

    try:
        if not _wait_for(job_ready, job_alive, READY_TIMEOUT_S):
            job.kill()
            return LatencyRun(failed(ctx, NAME, f"the job did not start: {tail(job.log, 8)}", job.log), topic, 0, 0, 0)
        producer.start()
        first_measured, error = _measure(job, producer, s)
        producer.stop()
        producer.join(timeout=90)
        if error:
            job.kill()
            return LatencyRun(failed(ctx, NAME, error, job.log), topic, first_measured, producer.sent, producer.lag_s)
        _wait_for(all_landed, job_alive, LAND_TIMEOUT_S)
        if job.proc.poll() is None:
            os.kill(job.proc.pid, signal.SIGTERM)  # the spark-submit JVM: its hook drains the job gracefully
        code = job.wait(s.run_timeout_s)
    except BaseException:
        producer.stop()
        job.kill()
        raise
    result = result_of(ctx, job, code, expect_exit=(0, 143))
    result.expected = producer.stats.records
    return LatencyRun(result, topic, first_measured, producer.stats.records, producer.lag_s)
