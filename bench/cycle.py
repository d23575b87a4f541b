"""The cycle breakdown: where one Sharelake micro-batch's time goes, step by step.

A phase of `python -m bench run` (`cycle_phase`: once with the shipped defaults, once with the tuned
settings) and a scenario of its own: `python -m bench cycle --records 100000 --partitions 4 [--label ...]`.
It runs the ingest job (until-drained, JSON payload) with Spark's event log on and py-spy
sampling the Python driver, then joins, per micro-batch with records:

- the sink's own steps, from the job's progress lines (`sink_ms drain=.. plan=.. ...`);
- Spark's own steps of the trigger clock's micro-batch (`spark_ms walCommit=.. commitOffsets=..`)
  and the whole trigger (`duration_ms`);
- every Spark job of the batch, from the event log (jobs carry their micro-batch id in
  `spark.job.description`; the SQL execution they run under says what they were: a Delta append,
  a collect, a DELETE), so the append's time splits into its Spark jobs and the driver's part
  (planning, the Delta commit protocol and post-commit work);
- the members' acknowledge + commit_sync time per poll (run summary `acks_s` / polls);
- the Python driver's profile: the functions py-spy found on the CPU most often.

Medians over the batches with records; the report prints them next to the per-batch total.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import re
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench.contenders.base import RunContext, RunResult, tail
from bench.contenders.sharelake import result_of, start_sharelake
from bench.harness import backlog, stamp, work_folder
from bench.settings import BenchSettings, add_arguments, from_args
from devkit.job_logs import progress_batches

HELP = "where one Sharelake micro-batch's time goes, step by step (the run's cycle phase, on its own)"
log = logging.getLogger(__name__)

PYSPY = Path(sys.executable).parent / "py-spy"


@dataclass
class CycleRun:
    """One measured run: its result, the per-batch steps (ms) and the driver's hottest functions."""

    label: str
    sets: tuple[str, ...]
    result: RunResult
    batches: list[dict[str, float]] = field(default_factory=list)
    profile: list[tuple[str, float]] = field(default_factory=list)  # (function, share of samples)
    profile_samples: int = 0
    ack_ms_per_poll: float = float("nan")

    def median(self, step: str) -> float:
        values = [b[step] for b in self.batches if step in b]
        return statistics.median(values) if values else float("nan")

    @property
    def steps(self) -> list[str]:
        seen: dict[str, None] = {}
        for b in self.batches:
            seen.update(dict.fromkeys(b))
        return list(seen)


def _command_kind(node: str) -> str | None:
    """What a command execution (its plan root is `Execute <Command>`) does, or None if not a command."""
    if not node.startswith("Execute "):
        return None
    if "SaveIntoDataSource" in node or "Append" in node or "WriteIntoDelta" in node:
        return "append"
    return "delete" if "Delete" in node else "command"


def event_log_jobs(event_dir: Path) -> dict[int, dict[str, float]]:
    """batch id -> {jobs.<kind>: ms summed, jobs.<kind>.count} from Spark's event log.

    A job's kind is the command whose execution was open when it started (an append's data job
    runs in an execution of its own, under the `Execute SaveIntoDataSourceCommand` one), else
    `query` (a collect); jobs outside any micro-batch (start-up, background checkpoints) go to -1.
    """
    root_of: dict[int, int] = {}
    open_commands: dict[int, list[tuple[int, str]]] = defaultdict(list)  # root execution -> open commands
    started: dict[int, tuple[int, int | None, str]] = {}  # job -> (submitted, batch, kind)
    out: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for path in sorted(event_dir.rglob("events_*")):
        for line in path.open(errors="replace"):
            e = json.loads(line)
            event = e["Event"]
            if event.endswith("SQLExecutionStart"):
                execution = int(e["executionId"])
                root_of[execution] = int(e.get("rootExecutionId", execution))
                kind = _command_kind(str((e.get("sparkPlanInfo") or {}).get("nodeName", "")))
                if kind is not None:
                    open_commands[root_of[execution]].append((execution, kind))
            elif event.endswith("SQLExecutionEnd"):
                execution = int(e["executionId"])
                commands = open_commands[root_of.get(execution, execution)]
                commands[:] = [c for c in commands if c[0] != execution]
            elif event == "SparkListenerJobStart":
                props = e.get("Properties") or {}
                m = re.search(r"batch = (-?\d+)", props.get("spark.job.description") or "")
                of = props.get("spark.sql.execution.id")
                commands = open_commands[root_of.get(int(of), int(of))] if of is not None else []
                kind = commands[-1][1] if commands else "query"
                started[e["Job ID"]] = (int(e["Submission Time"]), int(m.group(1)) if m else None, kind)
            elif event == "SparkListenerJobEnd" and e["Job ID"] in started:
                submitted, batch, kind = started.pop(e["Job ID"])
                key = batch if batch is not None else -1
                out[key][f"jobs.{kind}"] += int(e["Completion Time"]) - submitted
                out[key][f"jobs.{kind}.count"] += 1
    return {b: dict(v) for b, v in out.items()}


def profile_top(
    raw: Path, ours: tuple[str, ...] = ("sharelake/", "jobs/"), top: int = 12
) -> tuple[list[tuple[str, float]], int]:
    """The functions most often on the CPU in py-spy's raw (collapsed) output, by own samples.

    A stack's own function is its innermost frame; frames inside the project are named by file
    and function, others by function (module) as py-spy prints them.
    """
    own: Counter[str] = Counter()
    total = 0
    if not raw.exists():
        return [], 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        frames = stack.split(";")
        n = int(count)
        total += n
        leaf = frames[-1]
        caller = next((f for f in reversed(frames) if any(o in f for o in ours)), None)
        name = leaf if caller is None or caller == leaf else f"{leaf} <- {caller}"
        own[name] += n
    return [(name, n / total) for name, n in own.most_common(top)], total


def _is_python_driver(proc: psutil.Process) -> bool:
    try:
        return "python" in proc.name().lower() and any(a.endswith("ingest.py") for a in proc.cmdline())
    except psutil.Error:
        return False


class _Profiler:
    """py-spy on the job's Python driver (a child of the spark-submit JVM), once it appears."""

    def __init__(self, root_pid: int, out: Path) -> None:
        self.root_pid, self.out = root_pid, out
        self.proc: subprocess.Popen[bytes] | None = None

    def attach(self, timeout_s: float = 120) -> None:
        if not PYSPY.exists():
            log.warning("no py-spy in the venv: the cycle breakdown has no Python profile")
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                kids = psutil.Process(self.root_pid).children(recursive=True)
            except psutil.NoSuchProcess:
                return
            driver = next((k for k in kids if _is_python_driver(k)), None)
            if driver is not None:
                cmd = [str(PYSPY), "record", "--pid", str(driver.pid), "--format", "raw", "--rate", "50"]
                cmd += ["--gil", "--nonblocking", "-o", str(self.out)]  # Python on the CPU, not py4j waits
                with (self.out.parent / "py-spy.log").open("wb") as err:
                    self.proc = subprocess.Popen(cmd, stdout=err, stderr=subprocess.STDOUT)
                return
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is not None:
            try:
                self.proc.wait(30)  # py-spy ends with the process it records
            except subprocess.TimeoutExpired:
                self.proc.terminate()


def run_cycle(ctx: RunContext, label: str, sets: tuple[str, ...]) -> CycleRun:
    """One until-drained Sharelake run with the event log and the profiler on; its breakdown."""
    ctx.run_dir.mkdir(parents=True, exist_ok=True)
    conf_dir, events = ctx.run_dir / "spark-conf", ctx.run_dir / "events"
    conf_dir.mkdir(exist_ok=True)
    events.mkdir(exist_ok=True)
    (conf_dir / "spark-defaults.conf").write_text(
        f"spark.eventLog.enabled true\nspark.eventLog.dir file://{events}\nspark.eventLog.compress false\n"
    )
    job = start_sharelake(ctx, "until-drained", extra_sets=sets, env={"SPARK_CONF_DIR": str(conf_dir)})
    profiler = _Profiler(job.proc.pid, ctx.run_dir / "py-spy.txt")
    profiler.attach()
    code = job.wait(ctx.settings.run_timeout_s)
    profiler.stop()
    result = result_of(ctx, job, code)
    run = CycleRun(label, sets, result)
    if not result.ok:
        log.warning("cycle run %s failed: %s", label, result.error[:500])
        return run
    batches = progress_batches(job.log)
    jobs = event_log_jobs(events)
    for batch, row in sorted(batches.items()):
        if row["records"] <= 0:
            continue
        row = dict(row)
        row.update(jobs.get(batch, {}))
        if "sink.write" in row:  # the append's driver side: the write step minus its Spark jobs
            row["write.driver"] = row["sink.write"] - row.get("jobs.append", 0.0)
        run.batches.append(row)
    polls = max(1.0, result.details.get("polls", 0.0))
    run.ack_ms_per_poll = 1000 * result.details.get("acks_s", float("nan")) / polls
    run.profile, run.profile_samples = profile_top(ctx.run_dir / "py-spy.txt")
    log.info("cycle %s: %d batches with records, log %s", label, len(run.batches), tail(job.log, 0))
    return run


BASELINE = Path(__file__).resolve().parent / "baselines" / "cycle-before.json"

# the breakdown's rows: (step key, label); a step no run has is left out of the table
ROWS = (
    ("records", "records per batch"),
    ("total", "the whole micro-batch (Spark's triggerExecution)"),
    ("spark.walCommit", "Spark: the clock's offset log (walCommit)"),
    ("spark.commitOffsets", "Spark: the clock's commit log (commitOffsets)"),
    ("spark.other", "Spark: planning, latestOffset, getBatch"),
    ("sink.drain", "sink: drain (waiting for polls)"),
    ("sink.plan", "sink: plan (other writers' commits, dedup, copies)"),
    ("sink.arrow", "sink: Arrow (candidates, driver checks, stamp, offsets)"),
    ("sink.frame", "sink: the frame (the rows as Arrow batches in its tasks)"),
    ("sink.classify", "sink: verdict pass (before: in the driver)"),
    ("sink.wait", "sink: waiting for a committer (post-commit work)"),
    ("sink.write", "sink: the append until the commit is durable"),
    ("jobs.append", "  of it: the append's Spark job(s) (event log)"),
    ("write.driver", "  of it: the driver (planning, Delta commit protocol)"),
    ("sink.find", "sink: finding our commit in the log (before)"),
    ("sink.fold", "sink: folding the commit (and any gap), repair"),
    ("sink.diagnose", "sink: naming bad records (bad batches only)"),
    ("sink.dead_letter", "sink: dead-letter append (bad batches only)"),
    ("sink.decide", "sink: decide (ACCEPT/REJECT commands)"),
    ("ack", "members: acknowledge + commit_sync per poll"),
)


def cycle_phase(kafka_bootstrap: str, s: BenchSettings, topic: str, work: Path) -> list[CycleRun]:
    """The defaults, then the tuned overrides, on one topic of `s.cycle_records` records."""
    configs = [("defaults", ())] + ([("tuned", s.cycle_tuned)] if s.cycle_tuned else [])
    runs = []
    for label, sets in configs:
        ctx = RunContext(kafka_bootstrap, topic, s.cycle_partitions, s.cycle_records, 0, work / label, s, "cycle")
        log.info("cycle: %s %s on %d partitions, %d records", label, sets, s.cycle_partitions, s.cycle_records)
        try:
            runs.append(run_cycle(ctx, label, sets))
        except Exception as e:
            log.exception("cycle run %s failed", label)
            runs.append(
                CycleRun(label, sets, RunResult("sharelake", "cycle", s.cycle_partitions, 0, False, error=repr(e)))
            )
    return runs


def _ms(value: float | None) -> str:
    return f"{value:,.0f}" if value is not None and math.isfinite(value) else "-"


def _baseline() -> dict[str, dict[str, float]]:
    try:
        return dict(json.loads(BASELINE.read_text())["runs"])
    except (OSError, ValueError, KeyError):
        return {}


def cycle_section(runs: list[CycleRun]) -> list[str]:
    """The report's markdown for the cycle breakdown: medians per batch, before (baseline) and now."""
    if not runs:
        return []
    before = _baseline()
    columns: list[tuple[str, dict[str, float]]] = []
    for run in runs:
        if run.label in before:
            columns.append((f"{run.label}, before", before[run.label]))
        now = {step: run.median(step) for step in run.steps}
        now["ack"] = run.ack_ms_per_poll
        columns.append((f"{run.label}, now", now))
    md = ["## Where one micro-batch goes\n"]
    md.append(
        "Medians over the micro-batches with records (ms, unless said otherwise), from the job's progress lines "
        "(the sink's steps, Spark's steps of the trigger clock), Spark's event log (the append's jobs) and the run "
        f"summary (acknowledgements per poll). `before` is the path before the one-job change, measured with the "
        f"same harness: {BASELINE.relative_to(BASELINE.parents[2])} says how.\n"
    )
    header = ["step", *(name for name, _ in columns)]
    rows = []
    for key, label in ROWS:
        if not any(key in col and math.isfinite(col[key]) for _, col in columns):
            continue
        rows.append(
            [label, *(f"{col[key]:,.0f}" if key in col and math.isfinite(col[key]) else "-" for _, col in columns)]
        )
    rate_row = ["records/s of the run (its whole window)"]
    for name, col in columns:
        if name.endswith("before"):
            rate_row.append(f"{col.get('records_per_s', math.nan):,.0f}")
        else:
            run = next(r for r in runs if name.startswith(r.label))
            rate_row.append(f"{run.result.rate:,.0f}" if run.result.ok else "failed")
    rows.append(rate_row)
    md.append("| " + " | ".join(header) + " |")
    md.append("| " + " | ".join("---" for _ in header) + " |")
    md += ["| " + " | ".join(r) + " |" for r in rows]
    md.append("")
    for run in runs:
        sets = ", ".join(run.sets) or "the shipped defaults"
        md.append(f"- **{run.label}** ({sets}): {len(run.batches)} micro-batches with records")
        if not run.result.ok:
            md.append(f"  - failed: {run.result.error[:300]}")
    md.append("")
    for run in runs:
        if not run.profile:
            continue
        md.append(
            f"The Python driver on the CPU ({run.label}; py-spy --gil, {run.profile_samples:,} samples at 50/s; "
            "a frame `a <- b` is `a` called from the project's `b`):\n"
        )
        md += [f"- {share:.1%} `{name}`" for name, share in run.profile[:8]]
        md.append("")
    return md


def cycle_json(runs: list[CycleRun]) -> list[dict[str, object]]:
    return [
        {
            "label": r.label,
            "sets": list(r.sets),
            "ok": r.result.ok,
            "rate": r.result.rate if r.result.ok else None,
            "medians": {step: r.median(step) for step in r.steps},
            "ack_ms_per_poll": r.ack_ms_per_poll,
            "batches": len(r.batches),
            "profile": r.profile,
        }
        for r in runs
    ]


def configure(parser: argparse.ArgumentParser) -> None:
    add_arguments(parser)
    parser.add_argument("--label", action="append", default=[], help="label=set1,set2 (repeatable); default: defaults")


def settings(args: argparse.Namespace) -> BenchSettings:
    return from_args(args)


def run(args: argparse.Namespace) -> int:
    """One broker, one topic, a run per `--label`; prints the medians."""
    s = settings(args)
    configs = [(lbl.split("=", 1)[0], tuple(x for x in lbl.split("=", 1)[1].split(",") if x)) for lbl in args.label]
    part = s.partitions[0]
    topic = f"cycle-p{part}"
    with (
        work_folder(s.work_dir, f"{stamp().file}-cycle", s.keep_work) as work,
        backlog(work, topic, part, s.records) as kafka,
    ):
        for label, sets in configs or [("defaults", ())]:
            ctx = RunContext(kafka.bootstrap, topic, part, s.records, s.members, work / label, s, "cycle")
            measured = run_cycle(ctx, label, sets)
            print(f"== {label} {sets}: {measured.result.rate:,.0f} records/s, {len(measured.batches)} batches")
            for step in measured.steps:
                print(f"  {step:28s} {measured.median(step):10.1f}")
            print(f"  ack+commit_sync per poll     {measured.ack_ms_per_poll:10.1f}")
            for name, share in measured.profile:
                print(f"  {share:6.1%} {name}")
    return 0
