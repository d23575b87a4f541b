"""Several Sharelake jobs in one share group writing one table: what scaling out by jobs costs.

Run on its own (not a phase of `bench.run`): `.cache/venv/bin/python -m bench.several_jobs
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
import json
import logging
import math
import shutil
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from app.testing.kafka_broker import EmbeddedKafka
from bench.contenders.base import RunContext, tail
from bench.contenders.sharelake import SharelakeJob, parse_job_log, start_sharelake
from bench.figures import finite_median, finite_or_none, fmt, fmt_rate, md_table
from bench.machine import machine_facts
from bench.settings import RESULTS_DIR, WORK_ROOT, BenchSettings
from bench.verify import check_exactly_once
from bench.workload import produce_backlog
from devkit.delta_log import data_commits, read_commits

log = logging.getLogger("bench")


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


def write_report(runs: list[JobsRun], s: BenchSettings, jobs: list[int], facts: dict[str, str], path: Path) -> Path:
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
            f"# Several jobs on one table ({time.strftime('%Y-%m-%d %H:%M')})",
            f"{s.records:,} JSON records on {s.partitions[0]} partitions, drained by k Sharelake jobs started at "
            "once in one share group, all appending to one table on local disk; "
            f"{len({r.round for r in runs})} round(s), job counts interleaved in each. Steady state: the rows of "
            "the data commits after the first / (last data commit - first). Scheduled: all rows / (first "
            "process start -> last data commit). Refused: commits Delta sent back because another job "
            "committed first (each re-checked and committed again with the same files); their seconds run "
            "from an append's first refusal until its commit is durable, against the jobs' `write` step seconds.",
            md_table(
                [
                    "jobs",
                    "runs ok",
                    "steady rows/s",
                    "vs 1 job",
                    "scheduled rows/s",
                    "commits",
                    "refused per commit",
                    "refused s",
                    "refused % of write",
                ],
                summary_rows,
            ),
            "## Every run",
            md_table(
                [
                    "round",
                    "jobs",
                    "ok",
                    "steady rows/s",
                    "vs 1 job",
                    "scheduled rows/s",
                    "rows",
                    "dup",
                    "commits",
                    "per job",
                    "refused",
                    "refused s",
                    "write s",
                ],
                round_rows,
            ),
            "## Machine\n\n" + md_table(["", ""], [[k, v] for k, v in facts.items()]),
            "## Settings\n\n" + md_table(["", ""], [[k, v] for k, v in s.as_table().items()]),
        ]
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    raw = [
        {k: finite_or_none(v) if isinstance(v, float) else v for k, v in {**asdict(r), "ratio": ratio(r)}.items()}
        for r in runs
    ]
    path.with_suffix(".json").write_text(
        json.dumps({"settings": s.as_table(), "machine": facts, "runs": raw}, indent=2)
    )
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--jobs", default="1,2,3", help="job counts, comma-separated (1 is the baseline)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--members", type=int, default=0, help="pump.members of each job (0: the shipped default)")
    ap.add_argument("--set", action="append", default=[], dest="sets", help="a --set for every job (repeatable)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: checks the harness, numbers mean nothing")
    ap.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    ap.add_argument("--keep-work", action="store_true")
    a = ap.parse_args(argv)
    records, partitions, rounds = (4_000, 2, 1) if a.smoke else (a.records, a.partitions, a.rounds)
    sets = ("pump.max_poll_records=250", *a.sets) if a.smoke else tuple(a.sets)  # smoke: several commits
    jobs = sorted({int(x) for x in a.jobs.split(",")} | {1})
    s = replace(
        BenchSettings(),
        size="several-jobs-smoke" if a.smoke else "several-jobs",
        records=records,
        partitions=(partitions,),
        runs=rounds,
        members=a.members,
        contenders=("sharelake",),
        sharelake_sets=sets,
        results_dir=a.results_dir,
        keep_work=a.keep_work,
    )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    stamp = time.strftime("%Y-%m-%d-%H%M%S")
    work = WORK_ROOT / f"{stamp}-{s.size}"
    facts = machine_facts()
    runs: list[JobsRun] = []
    try:
        with EmbeddedKafka(work / "broker", heap="1g") as kafka:
            topic = f"bench-jobs-p{partitions}-n{records}"
            kafka.create_topic(topic, partitions=partitions)
            produce_backlog(kafka.bootstrap, topic, records, s.producer_batch_bytes)
            for i in range(rounds):
                for k in jobs:
                    log.info("round %d: %d job(s) on one table", i + 1, k)
                    r = run_jobs(kafka, s, topic, k, i, work / "runs" / f"r{i}-k{k}")
                    log.info("  -> %s", f"{r.steady_rate:,.0f} rows/s steady" if r.ok else f"FAILED: {r.error[:300]}")
                    runs.append(r)
        check_exactly_once(runs, lambda r: records)
        report = write_report(runs, s, jobs, facts, s.results_dir / f"{stamp}-{s.size}.md")
    finally:
        if not s.keep_work:
            shutil.rmtree(work, ignore_errors=True)
    print(f"bench.several_jobs: report written to {report}")
    return 0 if all(r.ok for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
