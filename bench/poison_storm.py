"""A poison storm through the whole job: what a steady stream of bad records costs the rate, and
that every record is still decided exactly once (issue 38, part 3).

Run on its own, not a phase of `bench.run`: `.cache/venv/bin/python -m bench poison-storm [--smoke]
[--rate 3000] [--seconds 50] [--rounds 3] [--bad-fraction 0.1] [--kinds clean,poison] ...`; it writes
bench/results/<date>-poison-storm.md and .json (`bench.figures.save_report`).

On one embedded broker, per round, two runs at the same offered rate, each on a fresh topic of
`--partitions` partitions and a fresh share group: a clean run (every value a sample event of
`devkit.sample_data.event_value`) and a poison run (every `1 / --bad-fraction`-th value, record
ids 9, 19, 29, ... at 10%, the sample data's malformed JSON instead). Which of the two goes first
alternates from round to round, so a drift of the machine's other load falls on both alike. Each
run is `bench.latency.run_latency`: `jobs/ingest.py` through spark-submit as users run it
(continuous mode, `payload.format=json` with the sample events' schema, the shipped defaults),
a warm-up (`--warmup-seconds`, and until the first Delta commit and until under `--catch-up-s` of
load is undecided), `--seconds` of measured load from one producer thread at a fixed schedule,
then, once every record is decided (in the table or the dead-letter table), SIGTERM.

Once every run is done and the broker stopped, a SparkSession that is not the job's reads each
run's table and dead-letter table (`bench.verify`'s session): the table holds every good record
once (rows = distinct (topic, partition, offset) = distinct keys = the good records delivered, no
bad key, every `id` its key's), the dead-letter table every bad record once with class
`malformed_json` (rows = distinct offsets = distinct keys = the bad records delivered, no good
key, no other class), and the good rows' latency (`bench.verify.table_latency`, produce -> the
Delta commit). The rate the job kept (decided/s) is the measured records over the first one's
produce time -> the last commit to either table (a job that keeps up decides them about as fast as
they come; one that falls behind, slower). From the job's progress lines (one per micro-batch)
over the same window: the batches' share of it (busy), records per busy second, and the medians of
the sink's steps (`sink_ms`: write, diagnose, dead_letter, ...); from its run summary the share of
the run a dead-letter append ran beside the batches. The figure of the issue is poison / clean of
decided/s per round, and its median over the rounds (target: >= 0.8).
"""

from __future__ import annotations

import argparse
import logging
import math
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bench.contenders import sharelake
from bench.figures import finite_or_none, fmt, fmt_rate, kv_table, md_table, runs_data, save_report, table_report
from bench.harness import RESULTS_DIR, WORK_ROOT, Stamp, add_places, add_settings, settings_from, stamp, work_folder
from bench.latency import LatencyRun, run_latency
from bench.machine import load_average, machine_facts
from bench.settings import BenchSettings, carried
from bench.verify import table_latency
from devkit.delta_log import read_commits, rows_in
from devkit.ingest_job import dead_letter_of
from devkit.job_logs import log_time
from devkit.sample_data import EVENT_SCHEMA, POISON_VALUES, event_value
from devkit.spark_check import spark_session
from sharelake.testing.kafka_broker import EmbeddedKafka

HELP = "a clean and a poison run per round at one offered rate: all decided exactly once, and poison / clean"
log = logging.getLogger(__name__)

TARGET_RATIO = 0.8  # poison / clean kept rate, the median over the rounds
BAD_VALUE: bytes = POISON_VALUES["malformed-json"] or b"{"  # the sample data's malformed JSON (never None)
BAD_CLASS = "malformed_json"  # the error class the JSON format gives BAD_VALUE
PAYLOAD = ("payload.format=json", f"payload.schema={EVENT_SCHEMA}")  # the sample events, as users declare them
KINDS = ("clean", "poison")


@dataclass(frozen=True)
class StormSettings:
    """The mode's sizes (printed in the report)."""

    size: str = "poison-storm"
    rate: int = 3000  # offered records/s, the same for both runs of a round
    seconds: float = 50.0  # measured load per run
    warmup_seconds: float = 15.0  # load before it (and at least until the first Delta commit) ...
    catch_up_s: float = 10.0  # ... and until less than this many seconds of load is undecided
    partitions: int = 4
    rounds: int = 3
    bad_fraction: float = 0.1  # of the poison runs' values; every round(1 / this)-th is malformed
    kinds: tuple[str, ...] = KINDS  # the runs of a round (a subset: no ratio; a cheaper smoke)
    window_seconds: float = 10.0  # latency per window of produce time (in the JSON)
    run_timeout_s: float = 900.0
    work_dir: Path = WORK_ROOT
    results_dir: Path = RESULTS_DIR
    keep_work: bool = False
    note: str = ""  # said in the report (e.g. what else ran on the machine)

    @property
    def bad_every(self) -> int:
        return round(1 / self.bad_fraction)

    def bench_settings(self) -> BenchSettings:
        """What `run_latency` and the Sharelake contender read."""
        return carried(
            self, contenders=(sharelake.NAME,), latency_rate=self.rate, latency_seconds=self.seconds,
            latency_warmup_seconds=self.warmup_seconds, latency_partitions=self.partitions,
            latency_window_seconds=self.window_seconds,
        )  # fmt: skip

    def as_table(self) -> dict[str, str]:
        b = BenchSettings()
        return {
            "offered rate, both runs of a round (records/s)": f"{self.rate:,}",
            "measured load per run (s)": f"{self.seconds:g}",
            "warm-up per run (s, and until the first Delta commit and the start's backlog is decided)": (
                f"{self.warmup_seconds:g} (backlog under {self.catch_up_s:g} s of load)"
            ),
            "partitions of every topic": str(self.partitions),
            "rounds (their runs: the order alternating)": f"{self.rounds} ({', '.join(self.kinds)})",
            "bad records in a poison run": f"1 in {self.bad_every} (ids {self.bad_every - 1}, "
            f"{2 * self.bad_every - 1}, ...): {BAD_VALUE!r}",
            "values": f"`devkit.sample_data.event_value` (~70-byte JSON), payload.schema `{EVENT_SCHEMA}`",
            "Sharelake": f"continuous mode, shipped defaults (pump.members={b.members}), a fresh share group per run",
            "run timeout (s)": f"{self.run_timeout_s:g}",
        }


SMOKE: dict[str, Any] = {
    "size": "smoke",
    "rate": 400,
    "seconds": 3.0,
    "warmup_seconds": 0.5,
    "catch_up_s": 5.0,
    "partitions": 2,
    "rounds": 1,
    "window_seconds": 1.5,
    "run_timeout_s": 240.0,
}


def values(bad_every: int) -> Callable[[int], bytes]:
    """Record i's value: the sample event i, or the malformed JSON for every `bad_every`-th (0: none)."""

    def value_of(i: int) -> bytes:
        return BAD_VALUE if bad_every and i % bad_every == bad_every - 1 else event_value(i)

    return value_of


def bad_count(records: int, bad_every: int) -> int:
    """Bad ones among ids 0 .. records - 1."""
    return records // bad_every if bad_every else 0


def decided(table: Path) -> int:
    """The records a run's job has decided: the rows of its table and its dead-letter table (commit logs)."""
    return rows_in(read_commits(table)) + rows_in(read_commits(dead_letter_of(table)))


# -- one run ---------------------------------------------------------------------------------------------


@dataclass
class TableCount:
    """What the reader found in one table."""

    rows: int = 0
    distinct_offsets: int = 0  # distinct (topic, partition, offset)
    distinct_keys: int = 0
    foreign: int = 0  # rows whose key is of the other kind (a bad record in the table, a good one dead-lettered)
    id_mismatch: int = 0  # the table's rows whose `id` is not their key's
    classes: dict[str, int] = field(default_factory=dict)  # dead-letter rows per error class


@dataclass
class StormRun:
    round: int
    kind: str  # "clean" or "poison"
    topic: str
    bad_every: int  # 0: the clean run
    ok: bool = False  # the run worked and the reader found every record decided exactly once
    error: str = ""
    problems: list[str] = field(default_factory=list)  # what the reader found wrong
    produced: int = 0  # records delivered (warm-up included)
    warmup_records: int = 0
    good_expected: int = 0
    bad_expected: int = 0
    producer_lag_s: float = 0.0
    landed: TableCount = field(default_factory=TableCount)
    dead: TableCount = field(default_factory=TableCount)
    load_s: float | None = None  # the measured load: the first measured record's produce time -> the last record's
    offered_rate: float | None = None  # measured records / load_s
    window_s: float | None = None  # the first measured record's produce time -> the last commit (both tables)
    kept_rate: float | None = None  # measured records decided / window_s: the rate the job kept
    tail_s: float | None = None  # the last record's produce time -> the last commit
    load_rate: float | None = None  # rows both tables' commits added during the measured load / load_s
    p50_ms: float | None = None  # good records: produce -> Delta commit, measured ones
    p99_ms: float | None = None
    latency_samples: int = 0
    batches: int = 0  # micro-batches with records inside the window (progress lines)
    median_in: float | None = None
    median_duration_ms: float | None = None
    busy: float | None = None  # the batches' summed duration / the window
    per_busy_s: float | None = None  # records those batches took in / their summed duration
    step_ms: dict[str, float] = field(default_factory=dict)  # median sink_ms per step over those batches
    summary: dict[str, float] = field(default_factory=dict)  # the job's `run ended:` counters
    log: str = ""
    table: str = ""
    ratio: float | None = None  # on a poison run: its kept rate / the clean run's of its round


def run_one(kafka: EmbeddedKafka, s: StormSettings, round_: int, kind: str, work: Path) -> tuple[StormRun, LatencyRun]:
    every = s.bad_every if kind == "poison" else 0
    topic = f"storm-{kind}-r{round_}"
    log.info("poison storm: round %d, %s run at %d records/s on %d partition(s)", round_, kind, s.rate, s.partitions)
    run = run_latency(
        kafka,
        s.bench_settings(),
        work / f"{kind}-{round_}",
        sharelake.NAME,
        topic,
        value_of=values(every),
        payload=PAYLOAD,
        decided=decided,
        catch_up_s=s.catch_up_s,
    )
    r = run.result
    bad = bad_count(run.produced, every)
    out = StormRun(
        round_, kind, topic, every, ok=r.ok, error=r.error, produced=run.produced, warmup_records=run.warmup_records,
        good_expected=run.produced - bad, bad_expected=bad, producer_lag_s=run.producer_lag_s,
        summary=dict(r.details), log=str(r.log or ""), table=str(r.table or ""),
    )  # fmt: skip
    log.info("  -> %s", f"{run.produced:,} records produced" if r.ok else f"FAILED: {r.error[:300]}")
    return out, run


# -- the reader ------------------------------------------------------------------------------------------


def _count(spark: SparkSession, table: Path, every: int, bad_table: bool, min_id: int) -> tuple[TableCount, int, int]:
    """(the counts, the earliest produce ms of a measured record, the latest produce ms); zeros if no table."""
    if not (table / "_delta_log").is_dir():
        return TableCount(), 0, 0
    df = spark.read.format("delta").load(str(table))
    kid = F.expr("try_cast(substring(cast(key as string), 3) as bigint)")  # keys are `k-<id>`
    bad = (kid % every == every - 1) if every else F.lit(False)
    foreign = ~bad if bad_table else bad
    produced = F.unix_millis("kafka_timestamp")
    aggs = [
        F.count(F.lit(1)).alias("n"),
        F.count_distinct("topic", "partition", "offset").alias("d"),
        F.count_distinct(kid).alias("k"),
        F.sum(F.when(foreign | kid.isNull(), 1).otherwise(0)).alias("f"),
        F.min(F.when(kid >= min_id, produced)).alias("t0"),
        F.max(produced).alias("t1"),
    ]
    if not bad_table:
        aggs.append(F.sum(F.when(F.col("id").eqNullSafe(kid), 0).otherwise(1)).alias("m"))
    row = df.agg(*aggs).first()
    assert row is not None
    count = TableCount(int(row["n"]), int(row["d"]), int(row["k"]), int(row["f"] or 0))
    if not bad_table:
        count.id_mismatch = int(row["m"] or 0)
    else:
        count.classes = {str(c): int(n) for c, n in df.groupBy("error_class").count().collect()}
    return count, int(row["t0"] or 0), int(row["t1"] or 0)


def problems_of(run: StormRun) -> list[str]:
    """Why the reader's counts are not every record decided exactly once (empty: they are)."""
    out = []
    t, d = run.landed, run.dead
    if not (t.rows == t.distinct_offsets == t.distinct_keys == run.good_expected):
        out.append(
            f"table: {t.rows:,} rows, {t.distinct_offsets:,} distinct offsets, {t.distinct_keys:,} distinct keys "
            f"for {run.good_expected:,} good records"
        )
    if t.foreign or t.id_mismatch:
        out.append(f"table: {t.foreign:,} rows of bad records, {t.id_mismatch:,} rows whose id is not their key's")
    if not (d.rows == d.distinct_offsets == d.distinct_keys == run.bad_expected):
        out.append(
            f"dead letters: {d.rows:,} rows, {d.distinct_offsets:,} distinct offsets, {d.distinct_keys:,} distinct "
            f"keys for {run.bad_expected:,} bad records"
        )
    if d.foreign:
        out.append(f"dead letters: {d.foreign:,} rows of good records")
    if set(d.classes) - {BAD_CLASS}:
        out.append(f"dead letters of other classes: {d.classes}")
    return out


def verify(spark: SparkSession, run: StormRun, s: StormSettings) -> None:
    """The reader's counts, the good rows' latency and the kept rate of one run (in place)."""
    if not run.table:
        return
    table = Path(run.table)
    run.landed, t0a, t1a = _count(spark, table, run.bad_every, False, run.warmup_records)
    run.dead, t0b, t1b = _count(spark, dead_letter_of(table), run.bad_every, True, run.warmup_records)
    run.problems = problems_of(run)
    run.ok = run.ok and not run.problems
    starts, ends = [t for t in (t0a, t0b) if t], [t for t in (t1a, t1b) if t]
    if starts and ends and max(ends) > min(starts):
        end = window(run, table, min(starts), max(ends))
        phases(run, min(starts), end)
    if run.landed.rows:
        lat = table_latency(spark, table, run.warmup_records, s.window_seconds, s.seconds)
        run.p50_ms, run.p99_ms = finite_or_none(lat.pct(50)), finite_or_none(lat.pct(99))
        run.latency_samples = lat.samples


def window(run: StormRun, table: Path, t0: int, t1: int) -> int:
    """The rates of a run whose measured load was produced over [t0, t1] (ms: the first measured
    record's produce time, the last record's), from both tables' commit logs; the last commit's ms."""
    commits = [c for t in (table, dead_letter_of(table)) for c in read_commits(t) if c.output_rows > 0]
    end = max((c.timestamp_ms for c in commits), default=t1)
    measured = run.produced - run.warmup_records
    run.load_s, run.window_s = (t1 - t0) / 1000, (end - t0) / 1000
    run.offered_rate = measured / run.load_s
    run.kept_rate = measured / run.window_s if end > t0 else None
    run.tail_s = (end - t1) / 1000
    run.load_rate = sum(c.output_rows for c in commits if t0 <= c.timestamp_ms <= t1) / run.load_s
    return end


_PROGRESS = re.compile(r"batch \d+: in=(\d+) .*?duration_ms=(\d+) .*?\| sink_ms (.*?) \| spark_ms")


def phases(run: StormRun, t0: int, t1: int) -> None:
    """The progress lines of the batches with records logged inside [t0, t1] (ms: the window): busy
    share, records per busy second, median step times."""
    path = Path(run.log)
    if not path.exists():
        return
    ins, durations, inside, steps = [], [], [], []
    for line in path.read_text(errors="replace").splitlines():
        m = _PROGRESS.search(line)
        at = log_time(line) if m else None
        if m is None or at is None or not t0 / 1000 <= at <= t1 / 1000 or int(m.group(1)) == 0:
            continue
        ins.append(int(m.group(1)))
        durations.append(int(m.group(2)))
        inside.append(min(durations[-1], at * 1000 - t0))  # a batch logged early in the window began before it
        steps.append({k: float(v) for k, v in (kv.split("=", 1) for kv in m.group(3).split())})
    if not ins:
        return
    run.batches = len(ins)
    run.median_in = statistics.median(ins)
    run.median_duration_ms = statistics.median(durations)
    run.busy = sum(inside) / (t1 - t0)
    run.per_busy_s = sum(ins) / (sum(durations) / 1000) if sum(durations) else None
    names = dict.fromkeys(k for st in steps for k in st)
    run.step_ms = {k: statistics.median(st.get(k, 0.0) for st in steps) for k in names}


def verify_all(runs: list[StormRun], s: StormSettings) -> None:
    with spark_session() as spark:
        for run in runs:
            try:
                verify(spark, run, s)
            except Exception as e:
                log.exception("verifying round %d %s failed", run.round, run.kind)
                run.ok, run.error = False, run.error or f"verifying raised {e!r}"
    for round_ in sorted({r.round for r in runs}):
        pair = {r.kind: r for r in runs if r.round == round_}
        clean, poison = pair.get("clean"), pair.get("poison")
        if clean and poison and clean.kept_rate and poison.kept_rate is not None and clean.ok and poison.ok:
            poison.ratio = poison.kept_rate / clean.kept_rate


# -- the report ------------------------------------------------------------------------------------------


def kept_share(r: StormRun) -> float | None:
    return r.kept_rate / r.offered_rate if r.kept_rate is not None and r.offered_rate else None


def run_row(r: StormRun) -> list[str]:
    decided = "yes" if r.ok else "NO: " + "; ".join([*([r.error[:200]] if r.error else []), *r.problems])
    return [
        str(r.round), r.kind, fmt_rate(r.offered_rate or math.nan), fmt_rate(r.kept_rate or math.nan),
        fmt(kept_share(r), 2), fmt(r.ratio, 2),
        f"{r.landed.rows:,} / {r.good_expected:,}", f"{r.dead.rows:,} / {r.bad_expected:,}",
        ", ".join(f"{k} {v:,}" for k, v in r.dead.classes.items()) or "-", decided.replace("|", "/"),
        fmt(r.p50_ms, 0), fmt(r.p99_ms, 0), fmt(r.tail_s, 1),
    ]  # fmt: skip


STEPS_SHOWN = ("drain", "plan", "write", "diagnose", "dead_letter", "decide")
PHASE_HEAD = [
    "round", "run", "warm-up records", "batches", "median records in", "median batch ms", "busy %", "records / busy s",
    *(f"{k} ms" for k in STEPS_SHOWN), "dead-letter appends, % of the run",
]  # fmt: skip


def phase_row(r: StormRun) -> list[str]:
    return [
        str(r.round), r.kind, f"{r.warmup_records:,}", str(r.batches), fmt(r.median_in, 0),
        fmt(r.median_duration_ms, 0), fmt(100 * r.busy if r.busy is not None else None, 0),
        fmt_rate(r.per_busy_s or math.nan),
        *(fmt(r.step_ms.get(k), 0) for k in STEPS_SHOWN),
        fmt(100 * share if (share := dead_letter_share(r)) is not None else None, 0),
    ]  # fmt: skip


@dataclass
class Verdict:
    ratios: list[float]
    median: float | None
    low: float | None
    high: float | None
    met: bool
    exactly_once: bool  # every run: every good record landed once, every bad one dead-lettered once
    busy_ratio: float | None  # poison / clean of the records per busy second, median over the rounds


def verdict(runs: list[StormRun], rounds: int, per_round: int = len(KINDS)) -> Verdict:
    ratios = [r.ratio for r in runs if r.kind == "poison" and r.ratio is not None]
    per_busy = []
    for round_ in range(rounds):
        pair = {r.kind: r for r in runs if r.round == round_}
        c, p = pair.get("clean"), pair.get("poison")
        if c and p and c.per_busy_s and p.per_busy_s:
            per_busy.append(p.per_busy_s / c.per_busy_s)
    median = statistics.median(ratios) if ratios else None
    return Verdict(
        ratios,
        median,
        min(ratios) if ratios else None,
        max(ratios) if ratios else None,
        median is not None and median >= TARGET_RATIO and len(ratios) == rounds,
        len(runs) == per_round * rounds and all(r.ok for r in runs),
        statistics.median(per_busy) if per_busy else None,
    )


def _median_of(runs: list[StormRun], kind: str, get: Callable[[StormRun], float | None]) -> float | None:
    xs = [x for r in runs if r.kind == kind and (x := get(r)) is not None]
    return statistics.median(xs) if xs else None


KEEPS_UP = 0.9  # decided / offered at or above this: the run kept up with the offered rate


def dead_letter_share(r: StormRun) -> float | None:
    """The share of the job's run (its `run ended:` seconds) a dead-letter append was running beside the batches."""
    seconds, append = r.summary.get("seconds"), r.summary.get("dead_letter_append_s")
    return append / seconds if seconds and append is not None else None


def bounds_text(runs: list[StormRun], v: Verdict) -> str:
    """What bounds the poison runs' rate and what the bad records cost, from the rates, the latency, the
    progress lines and the run summaries."""

    def med(kind: str, get: Callable[[StormRun], float | None]) -> float | None:
        return _median_of(runs, kind, get)

    def pair(get: Callable[[StormRun], float | None], unit: str = " ms") -> str:
        c, p = med("clean", get), med("poison", get)
        return f"{c:,.0f} -> {p:,.0f}{unit}" if c is not None and p is not None else "n/a"

    def step_of(name: str) -> Callable[[StormRun], float | None]:
        return lambda r: r.step_ms.get(name)

    diffs = []
    for step in sorted({k for r in runs for k in r.step_ms}):
        c, p = med("clean", step_of(step)), med("poison", step_of(step))
        if c is not None and p is not None:
            diffs.append((p - c, step, c, p))
    diffs.sort(reverse=True)
    grew = ", ".join(f"`{st}` {c:,.0f} -> {p:,.0f} ms" for d, st, c, p in diffs[:3] if d >= 1) or "none"
    write_c, write_p = med("clean", step_of("write")), med("poison", step_of("write"))
    busy_c, busy_p = med("clean", lambda r: r.busy), med("poison", lambda r: r.busy)
    kept_c, kept_p = med("clean", kept_share), med("poison", kept_share)
    share, waited = med("poison", dead_letter_share), med("poison", step_of("dead_letter"))
    out = []
    if kept_c is not None and kept_p is not None:
        out.append(
            f"Decided / offered, medians: {kept_c:.2f} clean, {kept_p:.2f} poison: "
            + (
                "both kinds of run kept up with the offered rate (below 1 by the tail: the last batch's latency), "
                "so at this rate the bad records did not slow the rate the job keeps; what they cost shows in the "
                "batches and the latency."
                if kept_c >= KEEPS_UP and kept_p >= KEEPS_UP
                else "the poison runs did not keep up with the offered rate: the sink steps that grew are the bound."
                if kept_p < KEEPS_UP <= kept_c
                else "not every run kept up, whatever its values (the machine's other load)."
            )
        )
    if busy_c is not None and busy_p is not None:
        out.append(
            f"In continuous mode the batches run back to back (they filled a median {100 * busy_c:.0f}% of the "
            f"window clean, {100 * busy_p:.0f}% poison) and each takes in what arrived meanwhile, so the busy share "
            "is not headroom, and records / busy s is close to the offered rate (above it while the rest of a start's "
            "backlog is worked off)."
        )
    out.append(
        f"Clean -> poison, medians over the runs: batch {pair(lambda r: r.median_duration_ms)}, good records' "
        f"p50 {pair(lambda r: r.p50_ms)}, p99 {pair(lambda r: r.p99_ms)}. The sink steps (medians of the "
        f"batches' `sink_ms` in the window) that grew most: {grew}. `diagnose` names the rows the write left out "
        "(a small job, unless the write's own job named them)."
    )
    if share is not None and waited is not None:
        cause = (
            ": on this machine's 2 shared cores they compete with the next batch's write for the CPU, the likely "
            "cause of the longer `write`"
            if write_c and write_p and write_p > 1.1 * write_c
            else ""
        )
        out.append(
            f"The dead-letter appends (`dead_letter_append_s` of the run summary) ran beside the next batch for a "
            f"median {100 * share:.0f}% of the poison runs' time, and the batches waited for one a median "
            f"{waited:,.0f} ms (the `dead_letter` step){cause}."
        )
    return " ".join(out)


METHOD = """\
How it was run: one embedded broker; per round a clean run and a poison run at the same offered rate, each on
a fresh topic of {partitions} partition(s) and a fresh share group, the order alternating by round so that a
drift in the machine's other load falls on both alike, and the ratio taken within the round. Each run is
`jobs/ingest.py` through `./spark-submit.sh` as users run it (continuous mode, `payload.format=json` with the
sample events' schema, the shipped defaults), {warmup:g} s of warm-up, and until its first Delta commit and
until less than {catch_up:g} s of load was undecided (the producer starts before the job's own warm-up, so a
slow start leaves a backlog the measured part must not begin with), then {seconds:g} s of measured load
from one producer thread at a fixed schedule; once every record was decided the
job got SIGTERM. A poison run's records 1 in {every} are malformed JSON, spread evenly (ids {every} k - 1).
Afterwards a SparkSession that is not the job's read every table and dead-letter table: good records landed =
rows = distinct (topic, partition, offset) = distinct keys = the good records delivered, no bad key in the
table and every `id` its key's; bad ones dead-lettered likewise, all of class `{cls}`, no good key. Offered/s
is the measured records over their produce times (first to last); decided/s, the rate the job kept, is the
same records over the first one's produce time -> the last commit to either table (a job that keeps up decides
them about as fast as they come; one that falls behind, slower); tail s is the last commit after the last
record was produced; p50 / p99 are the good records' produce -> Delta commit over the measured ones
(`bench.verify.table_latency`). From the job's progress lines over the same window: busy % is the batches'
summed duration over the window, records / busy s what they took in per second of it (in continuous mode the
batches run back to back, so it stays close to the offered rate), and the steps the medians of their
`sink_ms`. The landed / dead-lettered counts are of every record, the warm-up's included; warm-up records is
how many were produced before the measured part (the job's start, its first batches and the catch-up)."""


def write(
    runs: list[StormRun], s: StormSettings, facts: dict[str, str], at: Stamp, load_after: str, seconds: float
) -> Path:
    v = verdict(runs, s.rounds, len(s.kinds))
    shown = f"{v.median:.2f}" if v.median is not None else "n/a"
    spread = f"{v.low:.2f} - {v.high:.2f}" if v.low is not None and v.high is not None else "n/a"
    title = (
        f"Poison storm ({s.size}): 1 in {s.bad_every} records malformed JSON at {s.rate:,} records/s, "
        f"{s.rounds} round(s), started {at.minute}"
    )
    head = [
        "round", "run", "offered/s", "decided/s", "decided / offered", "poison / clean", "good landed / expected",
        "bad dead-lettered / expected", "dead-letter classes", "exactly once", "p50 ms", "p99 ms", "tail s",
    ]  # fmt: skip
    sections = [
        f"**Poison / clean, decided/s: median {shown} over {len(v.ratios)} round(s) (min - max {spread}); target >= "
        f"{TARGET_RATIO:g}: {'met' if v.met else 'not met'}.** Every good record landed once and every bad one "
        f"was dead-lettered once as `{BAD_CLASS}`, nothing else in either table: "
        f"{'yes, in every run' if v.exactly_once else 'NO (see the table above)'}.",
        METHOD.format(
            partitions=s.partitions,
            warmup=s.warmup_seconds,
            catch_up=s.catch_up_s,
            seconds=s.seconds,
            every=s.bad_every,
            cls=BAD_CLASS,
        ),
        *([s.note] if s.note else []),
        "## Where the batches' time went (progress lines inside the window)\n\n"
        + md_table(PHASE_HEAD, [phase_row(r) for r in runs]),
        "## What bounds it\n\n" + bounds_text(runs, v),
        "## Settings\n\n" + kv_table(s.as_table(), ("setting", "value")),
        f"Load average at the end (1, 5, 15 min): {load_after}. Whole run: {seconds / 60:.1f} min.",
    ]
    summary = {
        "settings": {k: str(x) if isinstance(x, Path) else x for k, x in asdict(s).items()},
        "bad_every": s.bad_every,
        "target_ratio": TARGET_RATIO,
        "verdict": asdict(v),
        "load_after": load_after,
        "seconds": seconds,
        "machine": facts,
    }
    suffix = "poison-storm" if s.size == "poison-storm" else f"poison-storm-{s.size}"
    rows = [run_row(r) for r in runs]
    text = table_report(title, (head, rows), facts, sections)
    return save_report(s.results_dir, f"{at.file}-{suffix}", text, runs_data(runs, summary))


# -- the command -----------------------------------------------------------------------------------------


def configure(p: argparse.ArgumentParser) -> None:
    add_settings(p, StormSettings(), {
        "rate": "offered records/s", "seconds": "measured load per run", "warmup_seconds": "load before it",
        "catch_up_s": "the warm-up also lasts until under this many seconds of load is undecided",
        "partitions": "partitions of every topic", "rounds": "rounds of a clean and a poison run",
        "kinds": "the runs of a round, comma-separated", "bad_fraction": "bad values in a poison run",
    })  # fmt: skip
    add_places(p)
    p.add_argument("--note", help="a sentence for the report, e.g. what else ran on the machine meanwhile")


def settings(args: argparse.Namespace) -> StormSettings:
    s = settings_from(args, StormSettings(), SMOKE)
    if (
        s.rate < 1
        or s.seconds <= 0
        or s.partitions < 1
        or s.rounds < 1
        or s.catch_up_s < 0
        or not s.kinds
        or set(s.kinds) - set(KINDS)
        or not 0 < s.bad_fraction <= 0.5
    ):
        raise SystemExit("bench poison-storm: need --rate >= 1, --seconds > 0, --partitions >= 1, --rounds >= 1, "
                         "--kinds among clean,poison, 0 < --bad-fraction <= 0.5")  # fmt: skip
    return replace(s, kinds=tuple(k for k in KINDS if k in s.kinds))


def run(args: argparse.Namespace) -> int:
    s = settings(args)
    at = stamp()
    facts = machine_facts()
    began = time.monotonic()
    runs: list[StormRun] = []
    with work_folder(s.work_dir, f"{at.file}-poison-storm-{s.size}", s.keep_work) as work:
        with EmbeddedKafka(work / "broker", heap="1g") as kafka:
            for round_ in range(s.rounds):
                for kind in s.kinds if round_ % 2 == 0 else s.kinds[::-1]:
                    runs.append(run_one(kafka, s, round_, kind, work / "runs")[0])
        verify_all(runs, s)  # the broker is down: the reader has the machine
        write(runs, s, facts, at, load_average(), time.monotonic() - began)
    return 0 if len(runs) == len(s.kinds) * s.rounds and all(r.ok for r in runs) else 1
