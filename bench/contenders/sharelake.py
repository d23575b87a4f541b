"""Contender (a), Sharelake itself: `./spark-submit.sh jobs/ingest.py` as users run it.

`run_sharelake` runs it until drained; `start_sharelake` starts it and leaves the stopping to the
caller (a continuous run is stopped with SIGTERM). Every run gets a fresh share group
(`kafka.auto_offset_reset` is `earliest` in conf/local.toml) and a fresh Delta table, with
`payload.format=json` and the workload's schema unless the caller passes other payload settings
(Avro, or several routed topics). The driver's process tree is sampled for memory throughout.

records/s = rows written / (time of the table's last commit - the start of `run_ingest`). The
start is the `run ended:` log line's time minus RunSummary.seconds (run_ingest's own clock, which
starts once the SparkSession is up, as for the Spark source contender). The window ends at the
last Delta commit, so it holds the start-up checks, the group join and the whole drain, but
neither the JVM start nor the idle timeout that ends an until-drained run.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from bench.contenders.base import RunContext, RunResult, failed, tail
from devkit.delta_log import data_commits, mean_commit_interval_s, read_commits, steady_rate
from devkit.ingest_job import JSON_PAYLOAD, ingest_command, stop_group
from devkit.job_logs import parse_job_log
from devkit.network import Host
from devkit.paths import PROJECT_ROOT
from devkit.procmem import MemoryPeak, TreeSampler

NAME = "sharelake"


def sharelake_command(
    ctx: RunContext,
    group: str,
    table: Path,
    mode: str,
    extra_sets: tuple[str, ...] = (),
    payload: tuple[str, ...] = JSON_PAYLOAD,
    destination: tuple[str, ...] | None = None,
    root: Path = PROJECT_ROOT,
) -> list[str]:
    """The job's command line (`devkit.ingest_job.ingest_command`) for a run: its topic, group and table, plus
    `--set`s (members: 0 keeps the default); `root`: the checkout whose spark-submit.sh and job run (another
    one: contender (a0), `--before-root`).

    `payload` says how values are read (default: the workload's JSON); `destination` replaces
    `kafka.topic` + `delta.table_path` (the routed runs of `bench.formats` name several topics).
    """
    return ingest_command(
        ctx.bootstrap, ctx.topic, group, table, mode,
        idle_timeout_ms=ctx.settings.idle_timeout_ms, members=ctx.members,
        sets=(*ctx.settings.sharelake_sets, *extra_sets), payload=payload, destination=destination, root=root,
    )  # fmt: skip


@dataclass
class SharelakeJob:
    """One started job: its process (group leader: the spark-submit JVM), log and memory sampler."""

    proc: subprocess.Popen[bytes]
    log: Path
    table: Path
    sampler: TreeSampler
    launched_at: float  # epoch seconds just before the process started

    def wait(self, timeout_s: float) -> int:
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            stop_group(self.proc)
            return -9
        finally:
            self.sampler.stop()

    def kill(self) -> None:
        stop_group(self.proc)
        self.sampler.stop()


def start_sharelake(
    ctx: RunContext,
    mode: str,
    extra_sets: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    payload: tuple[str, ...] = JSON_PAYLOAD,
    destination: tuple[str, ...] | None = None,
    *,
    group: str | None = None,
    table: Path | None = None,
    host: Host | None = None,
    root: Path = PROJECT_ROOT,
) -> SharelakeJob:
    """Start the job in the background; `group` and `table` default to a fresh group and the run's
    own table (`bench.several_jobs` gives several jobs the same ones); on `host` (a host of a
    `devkit.network`, `bench.scale_out`) when given, else on the machine's loopback. `root`: the
    checkout it runs from (another one imports its own `sharelake`: contender (a0) with `--before-root`)."""
    ctx.run_dir.mkdir(parents=True, exist_ok=True)
    table, log = table or ctx.run_dir / "table", ctx.run_dir / "sharelake.log"
    cmd = sharelake_command(ctx, group or ctx.group(NAME), table, mode, extra_sets, payload, destination, root)
    cmd = host.command(cmd) if host else cmd
    if root != PROJECT_ROOT:
        source = root / "app" if (root / "app" / "sharelake").is_dir() else root  # before the rename: root
        env = {**(env or {}), "PYTHONPATH": str(source)}
    launched_at = time.time()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=root, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own group: a stop reaches the JVM and the Python driver
            env={**os.environ, **(env or {})},
        )  # fmt: skip
    sampler = TreeSampler(proc.pid)
    sampler.start()
    return SharelakeJob(proc, log, table, sampler, launched_at)


def memory_details(peak: MemoryPeak) -> dict[str, float]:
    return {"jvm_rss_mib": peak.jvm_mib, "python_rss_mib": peak.python_mib, "tree_rss_mib": peak.total_mib}


def result_of(
    ctx: RunContext, job: SharelakeJob, code: int, expect_exit: tuple[int, ...] = (0,), name: str = NAME
) -> RunResult:
    """The RunResult of a finished job, from its exit code, log and table."""
    parsed = parse_job_log(job.log)
    if code not in expect_exit:
        why = "timed out" if code == -9 else f"exit code {code}"
        return failed(ctx, name, f"{why}: {tail(job.log, 8)}", job.log)
    commits = data_commits(read_commits(job.table))
    if parsed.started is None or not parsed.summary or not commits:
        return failed(ctx, name, f"no run summary in the log or no commit in the table: {tail(job.log, 8)}", job.log)
    window = commits[-1].timestamp_ms / 1000 - parsed.started
    details = {
        **parsed.summary,
        **memory_details(job.sampler.peak),
        "mean_commit_interval_s": mean_commit_interval_s(commits) or float("nan"),
        "steady_rate": steady_rate(commits) or float("nan"),
        "data_commits": float(len(commits)),
        "scheduled_s": commits[-1].timestamp_ms / 1000 - job.launched_at,  # process start -> last commit
    }
    rows = int(parsed.summary.get("rows_written", 0))
    return RunResult(name, ctx.phase, ctx.partitions, ctx.members, True, rows, window, "", job.table, job.log, details)


def run_sharelake(
    ctx: RunContext,
    name: str = NAME,
    extra_sets: tuple[str, ...] = (),
    payload: tuple[str, ...] = JSON_PAYLOAD,
    root: Path = PROJECT_ROOT,
) -> RunResult:
    """One until-drained run (`name` and the settings: contender (a2) and the Avro contender)."""
    job = start_sharelake(ctx, "until-drained", extra_sets, payload=payload, root=root)
    return result_of(ctx, job, job.wait(ctx.settings.run_timeout_s), name=name)


BEFORE = "sharelake-before"


def run_sharelake_before(ctx: RunContext) -> RunResult:
    """Contender (a0): the path before a change: the same run with `--before-sets`' settings, from the
    checkout `--before-root` names (default this one)."""
    return run_sharelake(ctx, BEFORE, ctx.settings.before_sets, root=ctx.settings.before_root or PROJECT_ROOT)
