"""Sharelake against its peers: `python -m bench run [--smoke] [sizes...]` (`make bench`).

Starts the embedded Kafka broker, produces the workload topics, runs every contender in turn
(throughput rounds interleaved run by run, then Sharelake's scaling and memory phases, then the
latency phase: Sharelake and Spark's Kafka source one after the other under the same offered load),
stops the broker, runs the failover phase on a 3-node cluster of its own, checks every Delta
table and computes the latency figures with one SparkSession, and writes the report:
bench/results/<date>-<size>.md with its PNG charts and a .json of the raw numbers.
Each phase lives in its own module; this one only orders them and keeps going when a run fails.
"""

from __future__ import annotations

import argparse
import logging
import math
import time
from dataclasses import replace
from pathlib import Path

from bench.contenders import CONTENDERS, RunContext, RunResult
from bench.contenders.base import attempt
from bench.cycle import cycle_phase
from bench.failover import failover_phase
from bench.harness import stamp, work_folder
from bench.latency import LatencyRun, run_latency_phase
from bench.machine import machine_facts
from bench.outcome import Outcome, TableRow
from bench.report import write_report
from bench.settings import BenchSettings, add_arguments, from_args
from bench.share_bound import max_record_locks
from bench.verify import check_table, table_latency
from devkit.proccpu import CpuAccount, child_with
from devkit.spark_check import spark_session
from devkit.workload import produce_backlog
from sharelake.testing.kafka_broker import EmbeddedKafka

HELP = "Sharelake against Spark's Kafka source, a ShareConsumer drain and Kafka's perf tool on one broker (make bench)"
log = logging.getLogger(__name__)
configure = add_arguments  # every size and knob of BenchSettings
settings = from_args


class Topics:
    """Workload topics, created and filled once per (partitions, records) and shared by the runs."""

    def __init__(self, kafka: EmbeddedKafka, s: BenchSettings) -> None:
        self.kafka, self.s = kafka, s
        self.made: dict[tuple[int, int], str] = {}
        self.produce_rates: dict[str, float] = {}

    def get(self, partitions: int, records: int) -> str:
        if (partitions, records) not in self.made:
            name = f"bench-p{partitions}-n{records}"
            self.kafka.create_topic(name, partitions=partitions)
            log.info("producing %d records to %s", records, name)
            stats = produce_backlog(self.kafka.bootstrap, name, records, self.s.producer_batch_bytes)
            self.produce_rates[name] = records / stats.seconds if stats.seconds else math.nan
            log.info("produced %s in %.1fs", name, stats.seconds)
            self.made[(partitions, records)] = name
        return self.made[(partitions, records)]


def run_one(name: str, ctx: RunContext) -> RunResult:
    log.info("%s: %s on %d partition(s), %d member(s)", ctx.phase, name, ctx.partitions, ctx.members)
    return attempt(name, CONTENDERS[name], ctx)


def run_counted(name: str, ctx: RunContext, broker: int | None) -> RunResult:
    """`run_one`, with the CPU its processes and the `broker` process spent meanwhile in its details
    (`devkit.proccpu`: `cpu_<kind>_s`; the bench's own process is not counted)."""
    account = CpuAccount(broker=broker)
    account.start()
    try:
        result = run_one(name, ctx)
    finally:
        split = account.stop()
    result.details.update(split.as_details())
    return result


def throughput_phase(kafka: EmbeddedKafka, s: BenchSettings, topics: Topics, work: Path, locks: int) -> list[RunResult]:
    """Every contender, run i of each in turn, its CPU counted; the sink ceiling writes batches of the share
    group's window (`locks` x partitions: what a share group lets be in flight), so its steady rate is the bound."""
    broker = child_with("kafka.Kafka", str(kafka.data_dir))
    results = []
    for p in s.partitions:
        topic = topics.get(p, s.records)
        for i in range(s.runs):
            for name in s.contenders:  # interleaved: run i of every contender sees the same machine state
                ctx = RunContext(kafka.bootstrap, topic, p, s.records, s.members, work / f"tp-p{p}-{name}-{i}", s)
                if name == "sink-ceiling":
                    ctx = replace(ctx, batch_rows=min(s.records, locks * p))
                results.append(run_counted(name, ctx, broker))
    return results


def lock_cap_phase(kafka: EmbeddedKafka, s: BenchSettings, topics: Topics, work: Path) -> list[RunResult]:
    """Sharelake with the group's record locks held at each of `s.lock_caps`, one run per partition count."""
    results = []
    for cap in s.lock_caps:
        capped = replace(s, sharelake_sets=(*s.sharelake_sets, f"kafka.partition_max_record_locks={cap}"))
        for p in s.partitions:
            topic = topics.get(p, s.records)
            ctx = RunContext(
                kafka.bootstrap, topic, p, s.records, s.members, work / f"locks{cap}-p{p}", capped, f"locks-{cap}"
            )
            results.append(run_one("sharelake", ctx))
    return results


def scaling_phase(kafka: EmbeddedKafka, s: BenchSettings, topics: Topics, work: Path) -> list[RunResult]:
    """Sharelake per (partitions, members); cells the throughput phase already ran are not run again."""
    results = []
    for p in s.scaling_partitions:
        for m in s.scaling_members:
            if m == s.members and p in s.partitions and "sharelake" in s.contenders:
                continue  # bench.report takes the throughput runs for this cell
            topic = topics.get(p, s.records)
            for i in range(s.scaling_runs):
                ctx = RunContext(kafka.bootstrap, topic, p, s.records, m, work / f"sc-p{p}-m{m}-{i}", s, "scaling")
                results.append(run_one("sharelake", ctx))
    return results


def memory_phase(kafka: EmbeddedKafka, s: BenchSettings, topics: Topics, work: Path) -> list[RunResult]:
    if s.memory_records <= 0:
        return []
    topic = topics.get(s.memory_partitions, s.memory_records)
    ctx = RunContext(
        kafka.bootstrap, topic, s.memory_partitions, s.memory_records, s.members, work / "memory", s, "memory"
    )
    return [run_one("sharelake", ctx)]


def verify_tables(results: list[RunResult], latency_runs: list[LatencyRun], outcome: Outcome) -> None:
    """Row counts and duplicates of every Delta table, and the latency figures (one SparkSession)."""
    s = outcome.settings
    with spark_session() as spark:
        for r in results:
            if r.table is None or not r.ok:
                continue
            check = check_table(spark, r.table)
            outcome.tables.append(TableRow(r, check.rows, check.duplicates))
        for run in latency_runs:
            if not run.result.ok or run.result.table is None:
                continue
            try:
                outcome.latencies[run.contender] = table_latency(
                    spark, run.result.table, run.warmup_records, s.latency_window_seconds, s.latency_seconds
                )
            except Exception as e:
                log.exception("latency figures of %s failed", run.contender)
                outcome.latency_errors[run.contender] = f"computing the figures raised {e!r}"


def run(args: argparse.Namespace) -> int:
    s = settings(args)
    at = stamp()
    outcome = Outcome(settings=s, started=at.text, machine=machine_facts())
    began = time.monotonic()
    with work_folder(s.work_dir, f"{at.file}-{s.size}", s.keep_work) as work:
        with EmbeddedKafka(work / "broker", heap="1g") as kafka:
            outcome.locks, outcome.locks_source = max_record_locks(kafka.bootstrap)
            for item in s.sharelake_sets:  # a fixed limit instead of the broker's cap
                if item.startswith("kafka.partition_max_record_locks="):
                    outcome.locks, outcome.locks_source = int(item.split("=", 1)[1]), f"--set {item}"
            topics = Topics(kafka, s)
            outcome.results += throughput_phase(kafka, s, topics, work / "runs", outcome.locks)
            if "sharelake" in s.contenders:
                outcome.results += lock_cap_phase(kafka, s, topics, work / "runs")
                outcome.results += scaling_phase(kafka, s, topics, work / "runs")
                outcome.results += memory_phase(kafka, s, topics, work / "runs")
                if s.cycle_records > 0:
                    topic = topics.get(s.cycle_partitions, s.cycle_records)
                    outcome.cycles = cycle_phase(kafka.bootstrap, s, topic, work / "runs" / "cycle")
            outcome.latency_runs = run_latency_phase(kafka, s, work / "runs" / "latency")
            outcome.results += [run.result for run in outcome.latency_runs]
            outcome.produce_rates = topics.produce_rates
        if s.failover_records > 0 and "sharelake" in s.contenders:  # its own cluster, once the broker is gone
            outcome.failover = failover_phase(s.failover_records, s.failover_rate, work / "runs" / "failover")
        verify_tables(outcome.results, outcome.latency_runs, outcome)
        outcome.seconds = time.monotonic() - began
        write_report(outcome, s.results_dir, f"{at.file}-{s.size}")
    return 0
