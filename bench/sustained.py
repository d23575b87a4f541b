"""The sustained rate: the highest offered load Sharelake, and Spark's Kafka source beside it, keep up with.

Run on its own, not a phase of `bench.run`: `.cache/venv/bin/python -m bench sustained [--smoke]
[--rates 5000,10000,...] [--seconds 60] ...`; it writes bench/results/<date>-sustained.md and .json.
On one embedded broker a priming step runs first and is not measured (`--prime-seconds` of the
first contender at the lowest rate: the first job after the broker's start was the slowest, whatever
it ran; results/2026-11-29-issue50-frames.md); then each contender (Sharelake first, then Spark's
Kafka source) runs once per offered rate, lowest first, each step on a fresh topic:
`bench.latency.run_latency` (warm-up, then `--seconds` of measured load, wait until every record
landed, SIGTERM). Once the step's job has
stopped, a SparkSession in a child process computes its latency (`bench.verify.table_latency`): it
ends with that process, so no Spark JVM runs beside the next step's job. A step passes when the run
succeeded, every record produced landed, the producer kept its schedule (else the machine, not the
job, was the limit: "producer behind"), the p99 of the measured records is within `--p99-limit-s`,
and the job did not fall behind (`falls_behind`); its sustained rate is the highest of the steps
passed in a row (0 if none). A p99 over the limit does not stop a contender: it steps on until a
step it does not keep up with, which gives a second figure, the highest rate kept up with whatever
the p99 (a job that batches a backlog keeps up with more than it serves within 2 s). The report
lists every step run, a failed one with its reasons, and both ratios Sharelake / Spark (target:
>= 1.5x).
"""

from __future__ import annotations

import argparse
import logging
import math
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.contenders import LABELS, spark_kafka_source
from bench.contenders import sharelake as sharelake_contender
from bench.figures import finite_or_none, finite_values, fmt, kv_table, md_table, save_report
from bench.harness import RESULTS_DIR, WORK_ROOT, add_places, add_settings, settings_from, stamp, work_folder
from bench.latency import CONTENDERS, LatencyRun, run_latency
from bench.machine import load_average, machine_facts
from bench.settings import BenchSettings, add_before_root, carried
from bench.verify import Window, table_latency
from devkit.spark_check import spark_session
from sharelake.testing.kafka_broker import EmbeddedKafka

HELP = "the highest offered rate Sharelake, and Spark's Kafka source beside it, keep up with"
BASE, PEER = sharelake_contender.NAME, spark_kafka_source.NAME  # the sustained-rate ratio: Sharelake / its peer
log = logging.getLogger(__name__)

PRODUCER_LAG_LIMIT_S = 2.0  # the producer fell behind its schedule by more: the offered load was not offered
GROWTH_FACTOR = 2.0  # falls behind: the last window's p99 is more than this times the early windows' ...
GROWTH_MIN_MS = 500.0  # ... and at least this much above it
TARGET_RATIO = 1.5  # Sharelake / Spark


@dataclass(frozen=True)
class SustainedSettings:
    """The mode's sizes (printed in the report)."""

    size: str = "sustained"
    rates: tuple[int, ...] = (2500, 5000, 10000, 15000, 20000, 25000, 30000)  # offered records/s, stepped up in order
    seconds: float = 60.0  # measured load per step
    warmup_seconds: float = 20.0  # load before it (and at least until the first Delta commit)
    partitions: int = 4
    p99_limit_s: float = 2.0
    window_seconds: float = 10.0  # p99 per window of produce time: shows a job falling behind
    prime_seconds: float = 5.0  # the priming step's warm-up and load, not measured (0: none)
    contenders: tuple[str, ...] = (sharelake_contender.NAME, spark_kafka_source.NAME)
    before_sets: tuple[str, ...] = ()  # contender sharelake-before's overrides, when it is named
    before_root: Path | None = None  # and the checkout it runs from
    run_timeout_s: float = 1800.0
    work_dir: Path = WORK_ROOT
    results_dir: Path = RESULTS_DIR
    keep_work: bool = False

    def bench_settings(self, rate: int) -> BenchSettings:
        """What `run_latency` and the contenders read, for one step."""
        carried_over = carried(
            self, latency_rate=rate, latency_seconds=self.seconds, latency_warmup_seconds=self.warmup_seconds,
            latency_partitions=self.partitions, latency_window_seconds=self.window_seconds,
        )  # fmt: skip
        return replace(carried_over, before_sets=self.before_sets, before_root=self.before_root)

    def as_table(self) -> dict[str, str]:
        b = BenchSettings()
        return {
            "offered rates (records/s), in order": ", ".join(f"{r:,}" for r in self.rates),
            "measured load per step (s)": f"{self.seconds:g}",
            "warm-up per step (s, and until the first Delta commit)": f"{self.warmup_seconds:g}",
            "partitions of every topic": str(self.partitions),
            "p99 limit (s)": f"{self.p99_limit_s:g}",
            "window for the falls-behind check (s)": f"{self.window_seconds:g}",
            "priming step, not measured (s of warm-up and of load)": f"{self.prime_seconds:g}",
            "producer lag limit (s)": f"{PRODUCER_LAG_LIMIT_S:g}",
            "contenders, in order": ", ".join(self.contenders),
            "sharelake-before": f"{', '.join(self.before_sets) or 'no overrides'}, "
            f"from {self.before_root or 'this checkout'}",
            "Sharelake pump.members": str(b.members),
            "Spark trigger": f'ProcessingTime("{b.latency_trigger}")',
            "run timeout (s)": f"{self.run_timeout_s:g}",
        }


SMOKE: dict[str, Any] = {
    "size": "smoke",
    "rates": (200, 400),
    "seconds": 4.0,
    "warmup_seconds": 1.0,
    "partitions": 2,
    "window_seconds": 2.0,
    "run_timeout_s": 300.0,
    "prime_seconds": 1.0,
}


@dataclass
class StepFigures:
    """A step's latency (ms, produce -> Delta commit) over its measured records, from `table_latency`."""

    samples: int
    unmatched: int
    rewritten: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    windows: list[Window]

    def growth(self) -> tuple[float, float]:
        """(the lowest p99 of the first half of the windows, the last window's p99); NaN with < 2 windows."""
        p99s = [w.p99_ms for w in self.windows if w.rows]
        if len(p99s) < 2:
            return math.nan, math.nan
        return min(p99s[: max(1, len(p99s) // 2)]), p99s[-1]

    def falls_behind(self) -> bool:
        """The latency grew over the run: the last window's p99 is more than GROWTH_FACTOR times the
        early one and GROWTH_MIN_MS above it (a job that keeps up has a flat p99)."""
        early, last = self.growth()
        return last > GROWTH_FACTOR * early and last - early >= GROWTH_MIN_MS


@dataclass
class Step:
    contender: str
    rate: int
    run: LatencyRun
    figures: StepFigures | None = None
    figures_error: str = ""
    reasons: list[str] = field(default_factory=list)  # why it did not keep up; empty: it did
    over_limit: str = ""  # its p99 over the limit, said in words; "": within the limit

    @property
    def keeps_up(self) -> bool:
        """Every record landed, on schedule, and the latency did not grow over the step."""
        return not self.reasons

    @property
    def passed(self) -> bool:
        """Kept up, with the p99 within the limit."""
        return self.keeps_up and not self.over_limit

    @property
    def failures(self) -> list[str]:
        return [*self.reasons, *([self.over_limit] if self.over_limit else [])]

    @property
    def landed(self) -> int:
        return self.run.result.records

    @property
    def producer_behind(self) -> bool:
        return self.run.producer_lag_s >= PRODUCER_LAG_LIMIT_S


@dataclass
class SustainedOutcome:
    settings: SustainedSettings
    started: str
    machine: dict[str, str]
    steps: list[Step] = field(default_factory=list)
    load_after: str = ""
    seconds: float = 0.0


def step_figures(table: str, min_id: int, window_s: float, span_s: float) -> StepFigures:
    """Run in a child process: a SparkSession, the step's latency from its table; the JVM ends with the process."""
    with spark_session() as spark:
        lat = table_latency(spark, Path(table), min_id, window_s, span_s)
    return StepFigures(lat.samples, lat.unmatched, lat.rewritten, lat.pct(50), lat.pct(99), lat.pct(100), lat.windows)


def figures_apart(table: Path, min_id: int, window_s: float, span_s: float) -> StepFigures:
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(step_figures, str(table), min_id, window_s, span_s).result()


def judge(step: Step, s: SustainedSettings) -> tuple[list[str], str]:
    """(why the step did not keep up, empty if it did; its p99 over the limit in words, "" if within)."""
    reasons = keep_up_reasons(step)
    f = step.figures
    if f is None or not math.isfinite(f.p99_ms) or f.p99_ms <= s.p99_limit_s * 1000:
        return reasons, ""
    return reasons, f"p99 {f.p99_ms / 1000:.2f} s > {s.p99_limit_s:g} s"


def keep_up_reasons(step: Step) -> list[str]:
    """Why the step did not keep up with its offered rate (empty: it did)."""
    run, r = step.run, step.run.result
    if not r.ok:
        return ["run failed: " + " / ".join(r.error.splitlines())[:300]]
    reasons = []
    if step.landed < run.produced:
        reasons.append(f"only {step.landed:,} of {run.produced:,} records landed")
    elif step.landed > run.produced:
        reasons.append(f"{step.landed:,} rows for {run.produced:,} records produced")
    if step.producer_behind:
        reasons.append(f"producer behind (up to {run.producer_lag_s:.1f} s late: the machine was the limit)")
    f = step.figures
    if f is None:
        return [*reasons, f"no latency figures: {step.figures_error}"]
    if not math.isfinite(f.p99_ms):
        reasons.append("no measured row in the table to take a p99 from")
    if f.falls_behind():
        early, last = f.growth()
        reasons.append(f"falls behind (p99 {early / 1000:.2f} s early, {last / 1000:.2f} s in the last window)")
    return reasons


def prime(kafka: EmbeddedKafka, s: SustainedSettings, work: Path) -> None:
    """The priming step: the first contender at the lowest rate for `prime_seconds` of warm-up and of load,
    on a topic of its own, not measured. The first job after the broker's start ran slower than the
    next whatever it ran (a longer warm-up, a first window's p99 up to three times the next job's): this
    step takes that, not the first measured contender."""
    if s.prime_seconds <= 0 or not s.contenders:
        return
    contender, rate = s.contenders[0], s.rates[0]
    log.info("sustained: priming with %s at %d records/s (not measured)", contender, rate)
    short = replace(s, seconds=s.prime_seconds, warmup_seconds=s.prime_seconds)
    topic = f"sustained-priming-p{s.partitions}"
    run = run_latency(kafka, short.bench_settings(rate), work / "priming", contender, topic=topic)
    if not run.result.ok:
        log.warning("sustained: the priming step failed (%s); the measured steps run anyway", run.result.error)


def run_steps(kafka: EmbeddedKafka, s: SustainedSettings, contender: str, work: Path) -> list[Step]:
    """One contender at each rate, lowest first, until the first step it does not keep up with (a p99
    over the limit does not stop it: the rate it keeps up with is the second figure)."""
    steps = []
    for rate in s.rates:
        log.info("sustained: %s at %d records/s on %d partition(s)", contender, rate, s.partitions)
        topic = f"sustained-{contender}-r{rate}-p{s.partitions}"
        run = run_latency(kafka, s.bench_settings(rate), work / f"{contender}-r{rate}", contender, topic=topic)
        step = Step(contender, rate, run)
        if run.result.ok and run.result.table is not None:
            try:
                step.figures = figures_apart(run.result.table, run.warmup_records, s.window_seconds, s.seconds)
            except Exception as e:
                log.exception("latency figures of %s at %d failed", contender, rate)
                step.figures_error = f"computing them raised {e!r}"
        step.reasons, step.over_limit = judge(step, s)
        steps.append(step)
        log.info("  -> %s", "passed" if step.passed else "FAILED: " + "; ".join(step.failures))
        if not step.keeps_up:
            break
    return steps


# -- the report ------------------------------------------------------------------------------------------


@dataclass
class Verdict:
    """A contender's sustained rate and what bounded it."""

    contender: str
    rate: int  # its highest passed step, 0 if none
    exact: bool  # False: a lower bound (every step passed, or only the producer fell behind)
    note: str


def verdict(steps: list[Step], contender: str, kept_up: bool = False) -> Verdict:
    """The highest rate of the steps passed in a row from the lowest (`kept_up`: kept up with, the p99
    aside), and what bounded it."""
    rate, failed = 0, None
    for st in (st for st in steps if st.contender == contender):
        if not (st.keeps_up if kept_up else st.passed):
            failed = st
            break
        rate = st.rate
    if failed is None:
        return Verdict(contender, rate, False, "passed every step: its limit is above the highest rate offered")
    why = failed.reasons if kept_up else failed.failures
    if failed.producer_behind and len(why) == 1:
        return Verdict(contender, rate, False, f"the producer fell behind at {failed.rate:,}: the machine's limit")
    return Verdict(contender, rate, True, f"failed at {failed.rate:,}: " + "; ".join(why))


def ratio(a: Verdict | None, b: Verdict | None) -> tuple[float, str, str]:
    """(Sharelake / Spark, its qualifier "=", ">=", "<=" or "?", the target's verdict)."""
    if a is None or b is None or a.rate <= 0 or b.rate <= 0:
        return math.nan, "", "not determined: a contender was not run or sustained none of the rates"
    value = a.rate / b.rate
    sign = {(True, True): "=", (False, True): ">=", (True, False): "<="}.get((a.exact, b.exact), "?")
    met = value >= TARGET_RATIO and sign in ("=", ">=")
    missed = value < TARGET_RATIO and sign in ("=", "<=")
    target = "met" if met else "not met" if missed else "not determined (bounds only)"
    return value, sign, target


def _step_row(st: Step) -> list[str]:
    f, run = st.figures, st.run
    early, last = f.growth() if f else (math.nan, math.nan)
    result = "passed" if st.passed else "failed: " + "; ".join(st.failures).replace("|", "/")
    return [
        f"{st.rate:,}", f"{run.produced:,}", f"{st.landed:,}", fmt(f.p50_ms if f else None, 0),
        fmt(f.p99_ms if f else None, 0), fmt(early, 0), fmt(last, 0), fmt(run.producer_lag_s * 1000, 0), result,
    ]  # fmt: skip


def report_markdown(o: SustainedOutcome) -> str:
    s = o.settings
    verdicts = {c: verdict(o.steps, c) for c in s.contenders}
    value, sign, target = ratio(verdicts.get(BASE), verdicts.get(PEER))
    kept = {c: verdict(o.steps, c, kept_up=True) for c in s.contenders}
    kept_value, kept_sign, kept_target = ratio(kept.get(BASE), kept.get(PEER))
    md = [f"# Sustained rate: Sharelake and Spark's Kafka source ({s.size}), {o.started}\n"]
    md.append(
        f"After an unmeasured priming step ({s.prime_seconds:g} s of warm-up and of load), each contender ran at "
        "each offered rate in turn, lowest first, on a fresh topic of "
        f"{s.partitions} partition(s) of one embedded broker (`bench.latency.run_latency`): a warm-up of "
        f"{s.warmup_seconds:g} s (and until the job's first Delta commit), then {s.seconds:g} s of measured load "
        "at a fixed schedule; once every record was in the table the job got SIGTERM. Latency of a row = the "
        "`commitInfo.timestamp` of the Delta version that added it - its `kafka_timestamp` (`bench.verify`), "
        "computed after the step with no job running. A step passes when the run succeeded, every record "
        f"produced landed, the producer was never more than {PRODUCER_LAG_LIMIT_S:g} s behind its schedule, the "
        f"p99 over the measured records is <= {s.p99_limit_s:g} s, and the job did not fall behind: the p99 of "
        f"the last {s.window_seconds:g} s window (by produce time) is not above {GROWTH_FACTOR:g}x the lowest p99 "
        f"of the first half of the windows by {GROWTH_MIN_MS / 1000:g} s or more. Its sustained rate is the "
        "highest of the steps passed in a row from the lowest. A p99 over the limit does not stop a contender: it "
        "goes on until a step it does not keep up with (every record landed on schedule, no falling behind), "
        "which gives the second figure, the highest rate kept up with whatever the p99.\n"
    )
    md.append("## Sustained rate\n")
    rows = [
        [LABELS[v.contender], f"{v.rate:,}" if v.exact else f">= {v.rate:,}", v.note.replace("|", "/")]
        for v in verdicts.values()
    ]
    md.append(md_table(["contender", "sustained records/s", "bounded by"], rows) + "\n")
    words = {"=": "", ">=": "at least ", "<=": "at most ", "?": "two lower bounds, so undetermined: "}
    shown = f"{words[sign]}{value:.2f}x" if math.isfinite(value) else "n/a"
    md.append(f"Sharelake / Spark's Kafka source: **{shown}**; target >= {TARGET_RATIO:g}x: **{target}**.\n")
    md.append("## Highest rate kept up with (the p99 aside)\n")
    rows = [
        [LABELS[v.contender], f"{v.rate:,}" if v.exact else f">= {v.rate:,}", v.note.replace("|", "/")]
        for v in kept.values()
    ]
    md.append(md_table(["contender", "kept up with, records/s", "bounded by"], rows) + "\n")
    shown = f"{words[kept_sign]}{kept_value:.2f}x" if math.isfinite(kept_value) else "n/a"
    md.append(f"Sharelake / Spark's Kafka source: **{shown}** ({kept_target} against {TARGET_RATIO:g}x).\n")
    header = ["offered records/s", "produced", "landed", "p50 ms", "p99 ms", "early p99 ms", "last-window p99 ms"]
    for c in s.contenders:
        md.append(f"## Steps of {LABELS[c]}\n")
        mine = [st for st in o.steps if st.contender == c]
        md.append(md_table([*header, "producer lag ms", "result"], [_step_row(st) for st in mine]) + "\n")
        for st in mine:
            f = st.figures
            if f and (f.samples != st.run.measured or f.unmatched or f.rewritten):
                md.append(
                    f"**Note**, {st.rate:,} records/s: {f.samples:,} measured rows for {st.run.measured:,} measured "
                    f"records; {f.unmatched:,} rows in a file no add action names; {f.rewritten:,} rewritten.\n"
                )
    md.append("Produced and landed count the warm-up records too; p50 / p99 are over the measured records only.\n")
    md.append("## Settings\n")
    md.append(kv_table(s.as_table(), ("setting", "value")) + "\n")
    md.append("## Machine\n")
    facts = {**o.machine, "load average at the end (1, 5, 15 min)": o.load_after}
    md.append(kv_table(facts) + "\n")
    md.append(f"Whole run: {o.seconds / 60:.1f} min.\n")
    return "\n".join(md)


def report_json(o: SustainedOutcome) -> dict[str, Any]:
    s = o.settings
    verdicts = {c: verdict(o.steps, c) for c in s.contenders}
    value, sign, target = ratio(verdicts.get(BASE), verdicts.get(PEER))
    kept = {c: verdict(o.steps, c, kept_up=True) for c in s.contenders}
    kept_value, kept_sign, _ = ratio(kept.get(BASE), kept.get(PEER))
    steps = []
    for st in o.steps:
        f, run = st.figures, st.run
        entry: dict[str, Any] = {
            "contender": st.contender, "rate": st.rate, "topic": run.topic, "passed": st.passed,
            "reasons": st.failures, "keeps_up": st.keeps_up, "error": run.result.error or st.figures_error,
            "produced": run.produced, "landed": st.landed, "warmup_records": run.warmup_records,
            "measured_records": run.measured, "producer_lag_s": run.producer_lag_s,
        }  # fmt: skip
        if f is not None:
            early, last = f.growth()
            entry |= finite_values({**asdict(f), "early_p99_ms": early, "last_p99_ms": last})
            entry["windows"] = [finite_values(asdict(w)) for w in f.windows]
        steps.append(entry)
    return {
        "started": o.started,
        "seconds": o.seconds,
        "machine": o.machine,
        "load_after": o.load_after,
        "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(s).items()},
        "criteria": {
            "p99_limit_s": s.p99_limit_s,
            "producer_lag_limit_s": PRODUCER_LAG_LIMIT_S,
            "growth_factor": GROWTH_FACTOR,
            "growth_min_ms": GROWTH_MIN_MS,
        },
        "steps": steps,
        "sustained": {c: asdict(v) for c, v in verdicts.items()},
        "ratio": {"value": finite_or_none(value), "qualifier": sign, "target": TARGET_RATIO, "verdict": target},
        "kept_up": {c: asdict(v) for c, v in kept.items()},
        "kept_up_ratio": {"value": finite_or_none(kept_value), "qualifier": kept_sign},
    }


# -- the command -----------------------------------------------------------------------------------------


def configure(p: argparse.ArgumentParser) -> None:
    add_settings(p, SustainedSettings(), {
        "rates": "offered records/s, comma-separated", "seconds": "measured load per step",
        "warmup_seconds": "load before it", "partitions": "partitions of every topic",
        "p99_limit_s": "a step's p99 limit", "window_seconds": "falls-behind check windows",
        "contenders": "a subset, comma-separated (sharelake-before too: the path before a change)",
        "before_sets": "sharelake-before's overrides, comma-separated section.key=value",
        "prime_seconds": "the unmeasured priming step's warm-up and load, before the first contender (0: none)",
    })  # fmt: skip
    add_before_root(p)
    add_places(p)


def settings(args: argparse.Namespace) -> SustainedSettings:
    s = settings_from(args, SustainedSettings(), SMOKE)
    unknown = set(s.contenders) - set(CONTENDERS)
    if unknown:
        raise SystemExit(f"bench sustained: unknown contender(s) {', '.join(sorted(unknown))}")
    if not s.rates or min(s.rates) < 1 or s.seconds <= 0 or s.partitions < 1 or s.window_seconds <= 0:
        raise SystemExit("bench sustained: need rates >= 1, --seconds > 0, --partitions >= 1, --window-seconds > 0")
    if s.prime_seconds < 0:
        raise SystemExit("bench sustained: need --prime-seconds >= 0")
    return replace(s, rates=tuple(sorted(set(s.rates))), contenders=tuple(c for c in CONTENDERS if c in s.contenders))


def run(args: argparse.Namespace) -> int:
    s = settings(args)
    at = stamp()
    suffix = "sustained" if s.size == "sustained" else f"sustained-{s.size}"
    out = SustainedOutcome(s, at.text, machine_facts())
    began = time.monotonic()
    with work_folder(s.work_dir, f"{at.file}-{suffix}", s.keep_work) as work:
        with EmbeddedKafka(work / "broker", heap="1g") as kafka:
            prime(kafka, s, work / "runs")
            for contender in s.contenders:
                out.steps += run_steps(kafka, s, contender, work / "runs")
        out.load_after = load_average()
        out.seconds = time.monotonic() - began
        save_report(s.results_dir, f"{at.file}-{suffix}", report_markdown(out), report_json(out))
    return 0
