"""Broker deaths under a running job: kill -9 a leader and a coordinator of a 3-node cluster, measure stalls.

`run_failover` returns what was produced and each death's stall (`FailoverRun`), enough to assert
exactly-once on the table (tests/test_failover.py); `bench.failover` reports the stall of each death
against its target. A producer feeds the topic at a steady rate while the job
(started by the caller, continuous mode) ingests it; the scenario kills, one at a time and at random
moments, the node that leads the most of the topic's partitions and then the node that coordinates
the share group (or, when that is the same node, the one that leads the most share-state
partitions), and restarts each after a while. The job itself is never restarted.

One producer runs throughout, at a steady rate: records for a partition whose leader is away wait
in its client while the other partitions keep flowing (a producer that flushed every chunk would
stop all partitions at each death, and the stall measured would be its own). A death's stall is
the longest gap between two Delta commits from the kill until the restarted node is back (and a
little after); each partition's wait is the same gap between the commits that hold records of
that partition (their offset ranges are in each commit's metadata), reported for the partitions
the dead node led and for the others.
"""

from __future__ import annotations

import itertools
import math
import random
import signal
import statistics
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from devkit.delta_log import Commit, data_commits, read_commits, rows_in
from devkit.kafka_cluster import EmbeddedKafkaCluster
from devkit.sample_data import Produced, produce_json_events

FIRST = 2_000  # records produced before the job's first commit; the steady rate starts after it
AFTER_RESTART_S = 5.0  # a stall may end just after the node is back: look this long past it


@dataclass
class Death:
    node: int
    role: str  # "partition leader" (and "group coordinator") / "group coordinator" / "share-state leader"
    killed_at: float  # epoch seconds
    led: list[int] = field(default_factory=list)  # the topic's partitions it led when it died
    restarted_at: float = 0.0
    stall_s: float = 0.0  # the longest gap between commits from the kill until shortly after the restart
    led_wait_s: float = 0.0  # the same gap, between commits holding a partition it led (the longest)
    others_wait_s: float = 0.0  # the same for the partitions other nodes led


@dataclass
class FailoverRun:
    produced: list[Produced] = field(default_factory=list)
    produced_until: float = 0.0  # epoch seconds: the steady producer's last record was delivered
    deaths: list[Death] = field(default_factory=list)
    job_rc: int | None = None
    job_survived: bool = False  # still running when every record had landed
    commit_gap_median_s: float = 0.0  # between commits, over the whole run: the stalls' baseline
    rows: int = 0  # rows in the table at the end, from its commit log
    counters: dict[str, float] = field(default_factory=dict)  # the job's `run ended:` line
    error: str = ""

    def summary(self) -> str:
        stalls = ", ".join(
            f"node {d.node} ({d.role}, led {d.led}) {d.stall_s:.1f} s, its partitions waited {d.led_wait_s:.1f} s, "
            f"the others {d.others_wait_s:.1f} s"
            for d in self.deaths
        )
        return (
            f"{len(self.produced)} records, {len(self.deaths)} broker deaths, stalls: {stalls}; "
            f"median gap between commits {self.commit_gap_median_s:.2f} s"
        )


def most_leading(cluster: EmbeddedKafkaCluster, topic: str, exclude: frozenset[int] = frozenset()) -> int:
    """The live node that leads the most partitions of `topic` (none of `exclude`)."""
    counts = Counter(n for n in cluster.leaders(topic).values() if n >= 0 and n not in exclude)
    return counts.most_common(1)[0][0]


def produce_steadily(
    bootstrap: str, topic: str, records: int, rate: int, start: int, run: FailoverRun, errors: list[BaseException]
) -> threading.Thread:
    """A thread that produces JSON events start..start+records-1 at `rate` records/s into `run.produced`."""

    def produce() -> None:
        try:
            run.produced.extend(produce_json_events(bootstrap, topic, records, start=start, rate=rate))
            run.produced_until = time.time()
        except BaseException as e:  # noqa: BLE001 - the caller asserts on it
            errors.append(e)

    thread = threading.Thread(target=produce, name="steady-producer", daemon=True)
    thread.start()
    return thread


def longest_gap(times: list[float], start: float, end: float) -> float:
    """The longest gap between consecutive `times` that overlaps [start, end] (end - start if none does)."""
    gaps = [b - a for a, b in itertools.pairwise(times) if b >= start and a <= end]
    return max(gaps, default=end - start)


def partitions_of(commit: Commit, topic: str) -> set[int]:
    """The partitions of `topic` whose records a Sharelake commit holds (its metadata's offset ranges)."""
    ranges = commit.user_metadata.get("sharelake", {}).get("ranges", {}).get(topic, {})
    return {int(p) for p in ranges}


def measure_stalls(run: FailoverRun, commits: list[Commit], topic: str) -> None:
    """Each death's stall and its partitions' waits, from the commits (load must still be flowing)."""
    data = data_commits(commits)
    times = [c.timestamp_ms / 1000 for c in data]
    by_partition: dict[int, list[float]] = {}
    for c in data:
        for p in partitions_of(c, topic):
            by_partition.setdefault(p, []).append(c.timestamp_ms / 1000)
    for d in run.deaths:
        end = min(d.restarted_at + AFTER_RESTART_S, run.produced_until or d.restarted_at + AFTER_RESTART_S)
        if end <= d.killed_at:  # the producer had finished: nothing was there to wait for
            d.stall_s = d.led_wait_s = d.others_wait_s = math.nan
            continue
        d.stall_s = longest_gap(times, d.killed_at, end)
        waits = {p: longest_gap(t, d.killed_at, end) for p, t in by_partition.items()}
        d.led_wait_s = max((w for p, w in waits.items() if p in d.led), default=math.nan)
        d.others_wait_s = max((w for p, w in waits.items() if p not in d.led), default=math.nan)


def run_failover(
    cluster: EmbeddedKafkaCluster,
    topic: str,
    group: str,
    table: Path,
    start_job: Callable[[], subprocess.Popen[bytes]],
    *,
    records: int = 100_000,
    rate: int = 2_000,
    seed: int = 932,
    land_timeout_s: float = 240.0,
    backlog: int = 0,
) -> FailoverRun:
    """Produce `records` at `rate`, kill and restart two nodes while the job ingests, stop the job.

    The topic must exist. `backlog`: of the `records`, this many more are produced at once before
    the steady rate starts, so the deaths fall while the job drains records Kafka has already
    committed (a job that keeps up has none: every partition's dead replica is still in its ISR
    until the fence, so no new record becomes readable anywhere, and every partition waits). The
    job is stopped with SIGTERM once every produced record is in the table (or after
    `land_timeout_s`); `job_rc` is its exit code.
    """
    rng = random.Random(seed)
    run = FailoverRun()
    errors: list[BaseException] = []
    job = start_job()
    try:
        first = FIRST + backlog
        run.produced += produce_json_events(cluster.bootstrap, topic, first)
        deadline = time.monotonic() + 120
        while not data_commits(read_commits(table)) and time.monotonic() < deadline and job.poll() is None:
            time.sleep(0.2)
        producer = produce_steadily(cluster.bootstrap, topic, records - first, rate, first, run, errors)

        for role in ("partition leader", "group coordinator"):
            time.sleep(rng.uniform(2.0, 6.0))
            if role == "partition leader":
                node = most_leading(cluster, topic)
                if node == cluster.group_coordinator(group):  # one death, both roles: say so in the report
                    role = "partition leader and group coordinator"
            else:
                node = cluster.group_coordinator(group)
                if node in {d.node for d in run.deaths}:
                    role, node = (
                        "share-state leader",
                        most_leading(cluster, "__share_group_state", exclude=frozenset(d.node for d in run.deaths)),
                    )
            led = sorted(p for p, n in cluster.leaders(topic).items() if n == node)
            death = Death(node, role, time.time(), led)
            cluster.kill(node)
            run.deaths.append(death)
            time.sleep(rng.uniform(5.0, 10.0))
            cluster.restart(node)
            death.restarted_at = time.time()

        producer.join(timeout=600)
        if errors:
            raise errors[0]
        deadline = time.monotonic() + land_timeout_s
        while rows_in(read_commits(table)) < len(run.produced) and time.monotonic() < deadline:
            if job.poll() is not None:
                break
            time.sleep(0.5)
        run.job_survived = job.poll() is None
    finally:
        if job.poll() is None:
            job.send_signal(signal.SIGTERM)  # the driver JVM: the job drains and exits
        try:
            run.job_rc = job.wait(90)
        except subprocess.TimeoutExpired:
            job.kill()
            run.job_rc = job.wait(30)

    commits = read_commits(table)
    run.rows = rows_in(commits)
    measure_stalls(run, commits, topic)
    times = [c.timestamp_ms / 1000 for c in data_commits(commits)]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    run.commit_gap_median_s = statistics.median(gaps) if gaps else 0.0
    return run
