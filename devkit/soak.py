"""The soak's scenario: a long steady load at 60% of the measured maximum, kill -9 of the driver, broker restarts.

Run by `python -m bench soak` (`bench.soak`: 30 minutes; the report goes to `bench/results/<stamp>-soak.md`)
and by `tests/test_soak.py` (a bounded run, asserting on what `run_soak` returns).

One embedded broker (the demo's deployment) holds a 4-partition topic; the ingest job runs as users
run it (`spark-submit.sh jobs/ingest.py`, continuous mode, the shipped defaults) and, like under a
supervisor, is started again at once whenever it dies. The run:
1. **calibrate**: a backlog is produced and drained by the running job; its drain rate (rows over
   the time between its first and last commit) is the measured maximum;
2. **steady**: a rate producer offers `fraction` of that maximum for `duration_s`; every
   `fault_every_s` a fault strikes, in the order `pattern` gives: `D` a SIGKILL of the driver's
   whole process group (the job is started again at once), `B` a SIGKILL of the broker (started
   again on its own data after `broker_down_s`). A fault never strikes before the job has landed
   rows again after the previous one (counted from SETTLE_S after it): on a slow machine a broker's
   restart alone took 20 s, so it waits for that rather than striking a job still recovering. If no
   row lands within `recover_timeout_s` of a fault, the soak fails saying so. The steady phase runs
   until every fault of `duration_s` has struck, past `duration_s` when the job recovered slowly;
3. **drain**: the producer stops; once every delivered record is a row the job is stopped with
   SIGTERM (a drain that does not finish within `drain_timeout_s` fails the soak);
4. **check**: Spark counts the rows, the distinct `(topic, partition, offset)` and the distinct keys
   (each produced id once), and the dead-letter rows.

Every `sample_s` it samples the lag (records offered to the producer and not yet in a Delta commit,
from the commit log read incrementally: during a broker outage the offered records wait in the
producer) and the job's memory (RSS of the JVM and of the Python driver).
A fault's recovery is the time from the fault until the lag is back under 2 s of the offered load,
looked for until the next fault. Per job start the report also gives the median cycle and write
time of its full micro-batches (from the progress lines), which shows the job's speed under the load.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import statistics
import subprocess
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from devkit.delta_log import Commit, CommitTail, rows_in
from devkit.ingest_job import dead_letter_of, ingest_command, stop_group
from devkit.job_logs import parse_job_log, progress_batches, race_counts
from devkit.paths import PROJECT_ROOT
from devkit.procmem import MIB, tree_rss
from devkit.workload import RateProducer, produce_backlog
from sharelake.testing.kafka_broker import EmbeddedKafka

log = logging.getLogger(__name__)

PARTITIONS = 4
RECOVERED_LAG_S = 2.0  # a fault is over once the lag is back under this many seconds of offered load
WARM_S = 60.0  # memory of a job incarnation is compared from this long after its start
RATE_WINDOW_S = 60.0  # the job's best commit rate under the load is taken over windows this long
FULL_BATCH = 0.75  # a start's batches with at least this share of its largest are its full ones
SETTLE_S = 10.0  # a fault's `landed` rows count from this long after it (past a broker's outage)
FAULT_KINDS = {"D": "driver kill -9", "B": "broker kill -9 + restart"}


@dataclass
class Sample:
    t_s: float  # since the steady phase began
    offered: int  # records handed to the producer so far, calibration backlog included
    rows: int  # rows in the table's commits
    jvm_mib: float
    python_mib: float
    incarnation: int  # which start of the job this sample measured (0 = the first)

    @property
    def lag(self) -> int:
        return max(0, self.offered - self.rows)


@dataclass
class Fault:
    kind: str  # "driver kill -9" / "broker kill -9 + restart"
    at_s: float  # since the steady phase began
    lag_at: int = 0  # records offered and not in a commit when it struck (0: it hit an idle job)
    recovered_s: float = -1.0  # until the lag was back under RECOVERED_LAG_S of load; -1 = not before the next fault
    peak_lag: int = 0  # the largest lag sampled between the fault and its recovery (or the next fault)
    lag_left: int = 0  # the lag when the next fault (or the run's end) came, if it had not recovered
    # rows committed from SETTLE_S after the fault until the next one, the last fault's until the
    # drain ended (the job went on)
    landed: int = 0


@dataclass
class SoakRun:
    max_rate: float = 0.0  # records/s, the calibration's drain
    rate: int = 0  # the offered load
    duration_s: float = 0.0
    fault_every_s: float = 0.0
    pattern: str = "DB"
    warm_s: float = WARM_S  # a job start's memory is measured from this long after it
    samples: list[Sample] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    delivered: int = 0
    rows: int = 0  # Spark's count of the table at the end
    distinct_offsets: int = 0
    distinct_keys: int = 0
    dead_lettered: int = 0
    incarnations: int = 0  # job starts
    drained_s: float = 0.0  # from the producer's stop until every delivered record was a row
    drained_rows: int = 0  # rows in the table's commits when the drain ended
    last_counters: dict[str, float] = field(default_factory=dict)  # the last job's `run ended:` line
    replans: int = 0  # appends of any job start re-planned: another writer had committed some records
    commit_conflicts: int = 0  # commits of any job start Delta refused for another writer's
    batches: list[dict[str, float]] = field(default_factory=list)  # per job start, see batches_by_start
    error: str = ""

    @property
    def lost(self) -> int:
        return self.delivered - self.distinct_keys

    @property
    def duplicates(self) -> int:
        return self.rows - self.distinct_offsets


def job_log(run_dir: Path, incarnation: int) -> Path:
    """Where a job start writes its output."""
    return run_dir / f"job-{incarnation}.log"


class Job:
    """The ingest job, started again at once whenever it is killed (as a supervisor would)."""

    def __init__(self, cmd: list[str], run_dir: Path) -> None:
        self.cmd = cmd
        self.run_dir = run_dir
        self.incarnation = -1
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def log(self) -> Path:
        return job_log(self.run_dir, self.incarnation)

    def start(self) -> None:
        self.incarnation += 1
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                self.cmd, cwd=PROJECT_ROOT, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip

    def kill9(self) -> None:
        """SIGKILL the whole process group (spark-submit JVM and Python driver), then start again."""
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(30)
        self.start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        stop_group(self.proc, grace_s=60.0)
        return self.proc.returncode


def restart(broker: EmbeddedKafka, down_s: float, failures: list[BaseException]) -> None:
    """SIGKILL the broker, leave it down for `down_s`, start it again on its own data and ports
    (in a thread: a start that fails goes to `failures`, for the soak to fail with)."""
    broker.kill()
    time.sleep(down_s)
    try:
        broker.start()
    except BaseException as e:  # noqa: BLE001 - reported by the soak's loop
        failures.append(e)


def calibrate(broker: EmbeddedKafka, topic: str, tail: CommitTail, records: int, timeout_s: float) -> float:
    """Produce `records` (ids 0..records-1) and time the running job's drain of them: records/s."""
    produce_backlog(broker.bootstrap, topic, records)
    commits: list[Commit] = []
    deadline = time.monotonic() + timeout_s
    while rows_in(commits) < records:
        if time.monotonic() > deadline:
            raise TimeoutError(f"calibration: {rows_in(commits)} of {records} rows after {timeout_s:.0f}s")
        time.sleep(0.5)
        commits += tail.new()
    data = [c for c in commits if c.output_rows > 0]
    span_s = (data[-1].timestamp_ms - data[0].timestamp_ms) / 1000
    return (rows_in(data) - data[0].output_rows) / span_s if span_s > 0 else float(records)


def run_soak(
    broker: EmbeddedKafka,
    work: Path,
    *,
    duration_s: float,
    fault_every_s: float,
    fraction: float = 0.6,
    calibrate_records: int = 200_000,
    rate: int | None = None,
    pattern: str = "DB",
    broker_down_s: float = 5.0,
    sample_s: float = 2.0,
    drain_timeout_s: float = 300.0,
    recover_timeout_s: float = 180.0,
    spark: SparkSession | None = None,
    sets: tuple[str, ...] = (),
    warm_s: float = WARM_S,
) -> SoakRun:
    """The soak described above, on `broker` (started; it is killed and restarted) in `work`.

    `rate` skips the calibration's measurement (the backlog is still produced and drained first).
    `spark`: a session for the final check (None: one is built). `sets`: the job's extra `--set`s.
    `warm_s`: a job start's memory is measured from this long after it (a short soak's starts are short)."""
    if not pattern or set(pattern) - set(FAULT_KINDS):
        raise ValueError(f"pattern {pattern!r}: use the letters D (driver kill) and B (broker restart)")
    work.mkdir(parents=True, exist_ok=True)
    topic, group, table = "soak", "g-soak", work / "table"
    broker.create_topic(topic, partitions=PARTITIONS)
    run = SoakRun(duration_s=duration_s, fault_every_s=fault_every_s, pattern=pattern, warm_s=warm_s)
    tail = CommitTail(table)
    job = Job(ingest_command(broker.bootstrap, topic, group, table, "continuous", sets=sets), work)
    producer: RateProducer | None = None
    restarting: threading.Thread | None = None
    restart_failures: list[BaseException] = []
    rows = 0
    try:
        measured = calibrate(broker, topic, tail, calibrate_records, timeout_s=600)
        rows = calibrate_records
        run.max_rate = measured
        run.rate = rate or int(fraction * measured)
        log.info("soak: drained the backlog at %.0f records/s; offering %d records/s for %.0f s",
                 measured, run.rate, duration_s)  # fmt: skip
        producer = RateProducer(broker.bootstrap, topic, run.rate, first_id=calibrate_records)
        producer.start()
        t0 = time.monotonic()
        next_fault = fault_every_s
        planned = math.ceil(duration_s / fault_every_s - 1e-9) - 1  # one at each fault_every_s before duration_s
        while (now := time.monotonic() - t0) < duration_s or len(run.faults) < planned:
            if restart_failures:
                raise RuntimeError(f"the broker did not come back after its kill -9: {restart_failures[0]!r}")
            last = run.faults[-1] if run.faults else None
            back = last is None or (landed_since_settled(run, last) and not (restarting and restarting.is_alive()))
            if now >= next_fault and len(run.faults) < planned and back:
                kind = FAULT_KINDS[pattern[len(run.faults) % len(pattern)]]
                fault = Fault(kind, now, lag_at=calibrate_records + producer.sent - rows)
                run.faults.append(fault)
                log.info("soak: %s at %.0f s", fault.kind, now)
                if fault.kind.startswith("driver"):
                    job.kill9()
                else:  # in the background: the sampling goes on through the outage
                    restarting = threading.Thread(
                        target=restart, args=(broker, broker_down_s, restart_failures), daemon=True
                    )
                    restarting.start()
                next_fault += fault_every_s
            elif last is not None and not back and now - last.at_s > recover_timeout_s:
                raise RuntimeError(
                    f"the job landed no row within {recover_timeout_s:.0f} s of the {last.kind} at {last.at_s:.0f} s "
                    f"(counting from {SETTLE_S:.0f} s after it)"
                )
            if not job.alive():  # died by itself: that is a finding, but keep the load flowing
                log.warning(
                    "soak: the job exited with %s; starting it again", job.proc.returncode if job.proc else None
                )
                job.start()
            rows += rows_in(tail.new())
            rss = tree_rss(job.proc.pid) if job.proc else None
            run.samples.append(
                Sample(
                    round(time.monotonic() - t0, 2), calibrate_records + producer.sent, rows,
                    round((rss or {}).get("jvm", 0) / MIB, 1), round((rss or {}).get("python", 0) / MIB, 1),
                    job.incarnation,
                )
            )  # fmt: skip
            time.sleep(sample_s)
        if restarting is not None:
            restarting.join(300)
            if restart_failures:
                raise RuntimeError(f"the broker did not come back after its kill -9: {restart_failures[0]!r}")
        producer.stop()
        producer.join(120)
        if producer.failure is not None:
            raise producer.failure
        run.delivered = calibrate_records + producer.stats.records
        if producer.stats.failures:
            raise RuntimeError(f"{producer.stats.failures} records were not delivered: {producer.stats.first_error}")
        stopped = time.monotonic()
        while rows < run.delivered and time.monotonic() - stopped < drain_timeout_s:
            time.sleep(0.5)
            rows += rows_in(tail.new())
        run.drained_s = time.monotonic() - stopped
        run.drained_rows = rows
        if rows < run.delivered:
            raise TimeoutError(f"the drain: {rows:,} of {run.delivered:,} rows after {drain_timeout_s:.0f} s")
    except Exception as e:
        log.exception("soak failed")
        run.error = repr(e)
        if producer is not None:
            producer.stop()
    finally:
        job.stop()
        run.incarnations = job.incarnation + 1
        run.last_counters = parse_job_log(job.log).summary
        run.replans, run.commit_conflicts = race_counts(job_log(work, i) for i in range(run.incarnations))
        run.batches = batches_by_start(work, run.incarnations)
    _recoveries(run)
    if not run.error:
        _check(run, spark, table, topic)
    return run


def landed_since_settled(run: SoakRun, fault: Fault) -> bool:
    """Whether the job has landed rows since `fault` settled (the first sample SETTLE_S after it):
    what `Fault.landed` counts, so far."""
    settled = [s for s in run.samples if s.t_s >= fault.at_s + SETTLE_S]
    return len(settled) > 1 and settled[-1].rows > settled[0].rows


def _recoveries(run: SoakRun) -> None:
    """Each fault's peak lag and recovery, looked for between it and the next fault."""
    recovered_lag = RECOVERED_LAG_S * run.rate
    ends = [f.at_s for f in run.faults[1:]] + [float("inf")]
    for fault, end in zip(run.faults, ends, strict=True):
        window = [s for s in run.samples if fault.at_s <= s.t_s < end]
        settled = [s for s in window if s.t_s >= fault.at_s + SETTLE_S]
        first = settled[0].rows if settled else (window[-1].rows if window else 0)
        last = settled[-1].rows if settled else first
        if end == float("inf") and run.drained_rows:  # the last fault: a restart may land only in the drain
            last = run.drained_rows
        fault.landed = last - first
        for s in window:
            fault.peak_lag = max(fault.peak_lag, s.lag)
            if s.t_s > fault.at_s + 1 and s.lag <= recovered_lag:
                fault.recovered_s = round(s.t_s - fault.at_s, 1)
                break
        else:
            fault.lag_left = window[-1].lag if window else 0


def best_rate(run: SoakRun, window_s: float = RATE_WINDOW_S) -> float:
    """The most rows/s the job committed over any `window_s` of the steady phase (under the load)."""
    best, j = 0.0, 0
    samples = run.samples
    for i, s in enumerate(samples):
        j = max(j, i)
        while j < len(samples) and samples[j].t_s - s.t_s < window_s:
            j += 1
        if j == len(samples):
            break
        best = max(best, (samples[j].rows - s.rows) / (samples[j].t_s - s.t_s))
    return best


def batches_by_start(run_dir: Path, starts: int) -> list[dict[str, float]]:
    """Per job start: its micro-batches, and the median records, cycle and write ms of its full ones."""
    out = []
    for inc in range(starts):
        log_path = job_log(run_dir, inc)
        batches = list(progress_batches(log_path).values()) if log_path.exists() else []
        if not batches:
            continue
        largest = max(b["records"] for b in batches)
        full = [b for b in batches if b["records"] >= FULL_BATCH * largest]
        out.append({
            "start": inc, "batches": len(batches), "full_batches": len(full),
            "records": statistics.median(b["records"] for b in full),
            "cycle_ms": statistics.median(b["total"] for b in full),
            "write_ms": statistics.median(b.get("sink.write", float("nan")) for b in full),
        })  # fmt: skip
    return out


def _check(run: SoakRun, spark: SparkSession | None, table: Path, topic: str) -> None:
    from devkit.spark_check import spark_session  # the benchmark's verification session, only when none is given

    with nullcontext(spark) if spark is not None else spark_session() as session:
        df = session.read.format("delta").load(str(table)).where(F.col("topic") == topic)
        row = df.agg(
            F.count(F.lit(1)).alias("n"),
            F.count_distinct("topic", "partition", "offset").alias("offsets"),
            F.count_distinct("key").alias("keys"),
        ).first()
        assert row is not None
        run.rows, run.distinct_offsets, run.distinct_keys = int(row["n"]), int(row["offsets"]), int(row["keys"])
        dead_letter = dead_letter_of(table)
        if (dead_letter / "_delta_log").exists():
            run.dead_lettered = session.read.format("delta").load(str(dead_letter)).count()


def memory_by_incarnation(run: SoakRun) -> list[dict[str, float]]:
    """Per job start that ran past `run.warm_s`: RSS once warm and at its end, and the trend (MiB/min)."""
    out = []
    for inc in sorted({s.incarnation for s in run.samples}):
        mine = [s for s in run.samples if s.incarnation == inc and s.python_mib > 0]
        if not mine:
            continue
        start = mine[0].t_s
        warm = [s for s in mine if s.t_s - start >= run.warm_s]
        if len(warm) < 5:
            continue
        minutes = np.array([s.t_s for s in warm]) / 60
        entry: dict[str, float] = {"incarnation": inc, "minutes": round(float(minutes[-1] - minutes[0]), 1)}
        for kind in ("python", "jvm"):
            mib = np.array([getattr(s, f"{kind}_mib") for s in warm])
            entry[f"{kind}_warm_mib"] = round(float(np.median(mib[: max(1, len(mib) // 5)])), 1)
            entry[f"{kind}_end_mib"] = round(float(np.median(mib[-max(1, len(mib) // 5) :])), 1)
            entry[f"{kind}_mib_per_min"] = round(float(np.polyfit(minutes, mib, 1)[0]), 2)
        out.append(entry)
    return out
