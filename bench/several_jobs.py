"""Several Sharelake jobs in one share group writing one table: what scaling out by jobs costs.

Run on its own (not a phase of `bench.run`): `.cache/venv/bin/python -m bench several-jobs
--records 200000 --partitions 8 --jobs 1,2,3 --rounds 2` (`--smoke` for tiny sizes). One broker,
one topic holding the backlog; per round, for each job count k (interleaved round by round), k
`jobs/ingest.py` processes are started at once, until-drained, with the same fresh share group and
the same fresh table (local disk), as the README's scale-out says. Each run gives:

- the aggregate steady-state rate: the rows of every data commit after the table's first /
  (its last data commit - its first), and the scheduled figure (rows / first process start -> last
  commit);
- the commits Delta refused for another job's commit (`commit_conflicts` of every job's run
  summary) per commit, and the seconds they cost (`commit_conflict_s`) against the jobs' `write`
  step (the append's Spark job and commit);
- exactly once: rows = the backlog, no (topic, partition, offset) twice (one SparkSession, after
  every run).

Writes `bench/results/<stamp>-several-jobs.md` and `.json`: per job count the median of the
rounds, each round's figures, and the ratio to one job's rate in the same round.
"""

from __future__ import annotations

import argparse
import logging
import math
import uuid
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from bench.contenders.base import RunContext, tail
from bench.contenders.sharelake import SharelakeJob, start_sharelake
from bench.figures import finite_median, finite_values, fmt, fmt_rate, kv_table, md_table, save_report
from bench.harness import Stamp, backlog, ints, stamp, work_folder
from bench.machine import machine_facts
from bench.settings import BenchSettings, add_drain_arguments, drain_settings
from bench.verify import check_exactly_once
from devkit.delta_log import data_commits, read_commits
from devkit.job_logs import parse_job_log
from sharelake.testing.kafka_broker import EmbeddedKafka

HELP = "several Sharelake jobs in one share group drain one backlog into one table: what scaling out by jobs costs"
log = logging.getLogger(__name__)


@dataclass
class JobsRun:
    """One run of k jobs on one table."""

    jobs: int
    round: int
    ok: bool = False
    error: str = ""
    rows: int = 0  # in the table (Spark's count)
    duplicates: int = 0  # rows - distinct (topic, partition, offset)
    commits: int = 0  # data commits in the table
    steady_rate: float = math.nan  # rows after the first data commit / (last - first data commit)
    scheduled_rate: float = math.nan  # rows / (first process start -> last data commit)
    refused: int = 0  # commits Delta refused for another job's commit, all jobs
    refused_s: float = 0.0  # seconds from those refusals to their commits, all jobs
    write_s: float = 0.0  # the jobs' `write` step seconds (Spark job + commit), all jobs
    per_job_commits: list[int] = field(default_factory=list)
    table: str = ""

    @property
    def refused_per_commit(self) -> float:
        return self.refused / self.commits if self.commits else math.nan

    @property
    def refused_share_of_write(self) -> float:
        return self.refused_s / self.write_s if self.write_s > 0 else math.nan


def run_jobs(kafka: EmbeddedKafka, s: BenchSettings, topic: str, k: int, i: int, run_dir: Path) -> JobsRun:
    """k jobs, one group, one table, until drained; never raises for a failed run."""
    out = JobsRun(k, i)
    table = run_dir / "table"
    group = f"bench-jobs{k}-{uuid.uuid4().hex[:8]}"
    started: list[SharelakeJob] = []
    try:
        for j in range(k):
            ctx = RunContext(kafka.bootstrap, topic, s.partitions[0], s.records, s.members, run_dir / f"job-{j}", s)
            started.append(start_sharelake(ctx, "until-drained", group=group, table=table))
        codes = [job.wait(s.run_timeout_s) for job in started]
    finally:
        for job in started:
            job.kill()
    out.table = str(table)
    bad = [(j, c) for j, c in enumerate(codes) if c != 0]
    if bad:
        j, c = bad[0]
        out.error = f"job {j}: {'timed out' if c == -9 else f'exit code {c}'}: {tail(started[j].log, 8)}"
        return out
    summaries = [parse_job_log(job.log).summary for job in started]
    if not all(summaries):
        out.error = "a job logged no run summary"
        return out
    commits = data_commits(read_commits(table))
    if len(commits) < 2:
        out.error = f"{len(commits)} data commit(s): no steady-state window"
        return out
    out.commits = len(commits)
    window_s = (commits[-1].timestamp_ms - commits[0].timestamp_ms) / 1000
    out.steady_rate = sum(c.output_rows for c in commits[1:]) / window_s if window_s > 0 else math.nan
    first_start = min(job.launched_at for job in started)
    out.scheduled_rate = sum(c.output_rows for c in commits) / (commits[-1].timestamp_ms / 1000 - first_start)
    out.refused = int(sum(x.get("commit_conflicts", 0) for x in summaries))
    out.refused_s = sum(x.get("commit_conflict_s", 0.0) for x in summaries)
    out.write_s = sum(x.get("write_s", 0.0) for x in summaries)
    out.per_job_commits = [int(x.get("delta_commits", 0)) for x in summaries]
    out.ok = True
    return out


SUMMARY_HEAD = [
    "jobs", "runs ok", "steady rows/s", "vs 1 job", "scheduled rows/s", "commits", "refused per commit", "refused s",
    "refused % of write",
]  # fmt: skip
RUNS_HEAD = [
    "round", "jobs", "ok", "steady rows/s", "vs 1 job", "scheduled rows/s", "rows", "dup", "commits", "per job",
    "refused", "refused s", "write s",
]  # fmt: skip


def write_report(runs: list[JobsRun], s: BenchSettings, jobs: list[int], facts: dict[str, str], at: Stamp) -> Path:
    ok = [r for r in runs if r.ok]
    one = {r.round: r.steady_rate for r in ok if r.jobs == 1}

    def ratio(r: JobsRun) -> float:
        base = one.get(r.round, math.nan)
        return r.steady_rate / base if r.jobs != 1 and base > 0 else math.nan

    summary_rows = []
    for k in jobs:
        cell = [r for r in ok if r.jobs == k]
        summary_rows.append(
            [
                str(k),
                f"{len(cell)} / {len([r for r in runs if r.jobs == k])}",
                fmt_rate(finite_median([r.steady_rate for r in cell])),
                fmt(finite_median([ratio(r) for r in cell]), 2) if k != 1 else "1",
                fmt_rate(finite_median([r.scheduled_rate for r in cell])),
                fmt(finite_median([float(r.commits) for r in cell]), 0),
                fmt(finite_median([r.refused_per_commit for r in cell]), 2),
                fmt(finite_median([r.refused_s for r in cell]), 2),
                fmt(finite_median([100 * r.refused_share_of_write for r in cell]), 1),
            ]
        )
    round_rows = [
        [
            str(r.round + 1),
            str(r.jobs),
            "yes" if r.ok else f"no: {r.error[:300]}",
            fmt_rate(r.steady_rate),
            fmt(ratio(r), 2),
            fmt_rate(r.scheduled_rate),
            f"{r.rows:,}",
            str(r.duplicates),
            str(r.commits),
            " / ".join(map(str, r.per_job_commits)),
            str(r.refused),
            fmt(r.refused_s, 2),
            fmt(r.write_s, 1),
        ]
        for r in runs
    ]
    text = "\n\n".join(
        [
            f"# Several jobs on one table ({at.minute})",
            f"{s.records:,} JSON records on {s.partitions[0]} partitions, drained by k Sharelake jobs started at "
            "once in one share group, all appending to one table on local disk; "
            f"{len({r.round for r in runs})} round(s), job counts interleaved in each. Steady state: the rows of "
            "the data commits after the first / (last data commit - first). Scheduled: all rows / (first "
            "process start -> last data commit). Refused: commits Delta sent back because another job "
            "committed first (each re-checked and committed again with the same files); their seconds run "
            "from an append's first refusal until its commit is durable, against the jobs' `write` step seconds.",
            md_table(SUMMARY_HEAD, summary_rows),
            "## Every run",
            md_table(RUNS_HEAD, round_rows),
            "## Machine\n\n" + kv_table(facts),
            "## Settings\n\n" + kv_table(s.as_table()),
        ]
    )
    raw = [finite_values({**asdict(r), "ratio": ratio(r)}) for r in runs]
    data = {"settings": s.as_table(), "machine": facts, "runs": raw}
    return save_report(s.results_dir, f"{at.file}-{s.size}", text + "\n", data)


def configure(p: argparse.ArgumentParser) -> None:
    add_drain_arguments(p, partitions=8)
    p.add_argument("--jobs", type=ints, default=(1, 2, 3), help="job counts, comma-separated (1 is the baseline)")
    p.add_argument("--members", type=int, default=0, help="pump.members of each job (0: the shipped default)")
    p.add_argument("--set", action="append", default=[], dest="sets", help="a --set for every job (repeatable)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes: checks the harness, numbers mean nothing")


def settings(a: argparse.Namespace) -> BenchSettings:
    s = replace(drain_settings(a), size="several-jobs", members=a.members, contenders=("sharelake",))
    if not a.smoke:
        return replace(s, sharelake_sets=tuple(a.sets))
    return replace(  # smoke: several commits
        s, size="several-jobs-smoke", records=4_000, partitions=(2,), runs=1,
        sharelake_sets=("pump.max_poll_records=250", *a.sets),
    )  # fmt: skip


def run(a: argparse.Namespace) -> int:
    s = settings(a)
    jobs = sorted({*a.jobs, 1})
    at = stamp()
    facts = machine_facts()
    runs: list[JobsRun] = []
    records, partitions = s.records, s.partitions[0]
    topic = f"bench-jobs-p{partitions}-n{records}"
    with work_folder(s.work_dir, f"{at.file}-{s.size}", s.keep_work) as work:
        with backlog(work, topic, partitions, records) as kafka:
            for i in range(s.runs):
                for k in jobs:
                    log.info("round %d: %d job(s) on one table", i + 1, k)
                    r = run_jobs(kafka, s, topic, k, i, work / "runs" / f"r{i}-k{k}")
                    log.info("  -> %s", f"{r.steady_rate:,.0f} rows/s steady" if r.ok else f"FAILED: {r.error[:300]}")
                    runs.append(r)
        check_exactly_once(runs, lambda r: records)
        write_report(runs, s, jobs, facts, at)
    return 0 if all(r.ok for r in runs) else 1
