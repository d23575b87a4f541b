"""The routing contender: one Sharelake job reading several topics into one table each.

It is weighed against contender (a) itself (`bench.contenders.sharelake.run_sharelake`) on each of
the same topics, one at a time. The job is
`./spark-submit.sh jobs/ingest.py` with `kafka.topics=[...]`, one `topics.<topic>.table_path` per
topic (`routed_tables`) and one shared `dead_letter.table_path`, the workload's JSON payload for
every topic, a fresh share group, until-drained. Its `run ended:` counters are per table, prefixed
with the topic's name (`sharelake.sink.write.destinations.counter_prefix`).

records/s = the rows of all tables / (the last commit of any table - the start of `run_ingest`):
contender (a)'s window, ended by whichever table committed last.

`after_first_batch` gives, for any Sharelake run, the rate once its first micro-batch is committed
(rows after it / time from its last commit to the run's last commit): the drain without the
start-up, the group join and the cold first batch, which a short run weighs more.
"""

from __future__ import annotations

import math
from pathlib import Path

from bench.contenders.base import RunContext, RunResult, failed, tail
from bench.contenders.sharelake import memory_details, start_sharelake
from devkit.delta_log import Commit, data_commits, read_commits, rows_in
from devkit.job_logs import parse_job_log
from sharelake.sink.write.destinations import counter_prefix

NAME = "sharelake-routed"
METADATA_KEY = "sharelake"  # sharelake.sink.dedup.commit_log.METADATA_KEY: the commit's batch id is under it


def routed_tables(run_dir: Path, topics: list[str]) -> dict[str, Path]:
    """topic -> the table a routed run lands it in."""
    return {t: run_dir / "tables" / t for t in topics}


def dead_letter_path(run_dir: Path) -> Path:
    return run_dir / "dead_letter"


def routed_destination(run_dir: Path, topics: list[str]) -> tuple[str, ...]:
    """The `--set`s naming the topics, their tables and the one dead-letter table."""
    listed = ",".join(f'"{t}"' for t in topics)
    return (
        f"kafka.topics=[{listed}]",
        *(f"topics.{t}.table_path={table}" for t, table in routed_tables(run_dir, topics).items()),
        f"dead_letter.table_path={dead_letter_path(run_dir)}",
    )


def _batch_id(c: Commit) -> int | None:
    meta = c.user_metadata.get(METADATA_KEY)
    return int(meta["batch_id"]) if isinstance(meta, dict) and "batch_id" in meta else None


def after_first_batch(tables: list[Path]) -> float:
    """records/s from the first micro-batch's (last) commit to the last commit of any table: rows
    landed after the first batch / that time. NaN with fewer than two batches."""
    commits = [c for t in tables for c in data_commits(read_commits(t))]
    ids = [b for b in map(_batch_id, commits) if b is not None]
    if not ids:
        return math.nan
    first = [c for c in commits if _batch_id(c) == min(ids)]
    t0 = max(c.timestamp_ms for c in first) / 1000
    t1 = max(c.timestamp_ms for c in commits) / 1000
    rows = sum(c.output_rows for c in commits) - sum(c.output_rows for c in first)
    return rows / (t1 - t0) if t1 > t0 and rows > 0 else math.nan


def run_sharelake_routed(ctx: RunContext, topics: list[str]) -> RunResult:
    """One until-drained job on `topics` (ctx.records: their records in all), one table per topic."""
    job = start_sharelake(ctx, "until-drained", destination=routed_destination(ctx.run_dir, topics))
    code = job.wait(ctx.settings.run_timeout_s)
    if code != 0:
        why = "timed out" if code == -9 else f"exit code {code}"
        return failed(ctx, NAME, f"{why}: {tail(job.log, 8)}", job.log)
    parsed = parse_job_log(job.log)
    tables = routed_tables(ctx.run_dir, topics)
    commits = {t: data_commits(read_commits(path)) for t, path in tables.items()}
    if parsed.started is None or not parsed.summary or not all(commits.values()):
        empty = [t for t, c in commits.items() if not c]
        why = f"no commit in the table(s) of {', '.join(empty)}" if empty else "no run summary in the log"
        return failed(ctx, NAME, f"{why}: {tail(job.log, 8)}", job.log)
    last = max(c[-1].timestamp_ms for c in commits.values()) / 1000
    rows = sum(int(parsed.summary.get(f"{counter_prefix(t)}rows_written", 0)) for t in topics)
    details = {
        **parsed.summary,
        **memory_details(job.sampler.peak),
        "data_commits": float(sum(len(c) for c in commits.values())),
        "rows_in_logs": float(sum(rows_in(c) for c in commits.values())),
        "after_first_batch_rate": after_first_batch(list(tables.values())),
    }
    return RunResult(
        NAME,
        ctx.phase,
        ctx.partitions,
        ctx.members,
        True,
        rows,
        last - parsed.started,
        "",
        ctx.run_dir,
        job.log,
        details,
    )
