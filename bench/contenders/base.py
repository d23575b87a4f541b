"""The contract of a contender: what it gets (`RunContext`), what it returns (`RunResult`), shared helpers.

A contender never raises for a failed run, it returns `RunResult(ok=False, error=...)` so that the
report can say what failed and why (`attempt` turns a raise into such a result too).
"""

from __future__ import annotations

import logging
import math
import os
import re
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.settings import BenchSettings
from devkit.delta_log import data_commits, read_commits, rows_in, steady_rate
from devkit.ingest_job import stop_group
from devkit.paths import PROJECT_ROOT

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunContext:
    bootstrap: str
    topic: str
    partitions: int
    records: int  # what the topic holds: a drain should land exactly these
    members: int
    run_dir: Path  # this run's own folder: table, checkpoint, logs
    settings: BenchSettings
    phase: str = "throughput"
    # rows per commit for the sink ceiling (e): the run that measures Sharelake in the same round sets
    # it; 0 = the default (bench.contenders.sink_ceiling.DEFAULT_BATCH_ROWS)
    batch_rows: int = 0

    def group(self, contender: str) -> str:
        """A fresh share group per run, so every run reads the topic from its start."""
        return f"bench-{contender}-{uuid.uuid4().hex[:8]}"


@dataclass
class RunResult:
    contender: str
    phase: str
    partitions: int
    members: int
    ok: bool
    records: int = 0  # records the run landed (Delta contenders) or consumed
    seconds: float = 0.0  # the measured window (see each contender's docstring)
    error: str = ""
    table: Path | None = None  # the Delta table to verify, for the Delta contenders
    log: Path | None = None
    details: dict[str, float] = field(default_factory=dict)
    expected: int = 0  # records the topic held (what a Delta table should end with); set by the caller

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.ok and self.seconds > 0 else float("nan")


def failed(ctx: RunContext, contender: str, error: str, log: Path | None = None) -> RunResult:
    return RunResult(contender, ctx.phase, ctx.partitions, ctx.members, ok=False, error=error, log=log)


def attempt(name: str, run: Callable[[RunContext], RunResult], ctx: RunContext) -> RunResult:
    """`run(ctx)`, a raise turned into a failed result; `expected` set to the topic's records; logged."""
    try:
        r = run(ctx)
    except Exception as e:
        logger.exception("%s failed", name)
        r = failed(ctx, name, f"raised {e!r}")
    r.expected = ctx.records
    logger.info(
        "  -> %s", f"{r.rate:,.0f} records/s ({r.records} in {r.seconds:.1f}s)" if r.ok else f"FAILED: {r.error[:300]}"
    )
    return r


def wait_until(done: Callable[[], bool], alive: Callable[[], bool], timeout_s: float, poll_s: float = 0.2) -> bool:
    """Whether `done()` came true before the timeout; False as soon as `alive()` is not (a job exited)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if done():
            return True
        if not alive():
            return False
        time.sleep(poll_s)
    return False


def tail(path: Path | None, lines: int = 15) -> str:
    if path is None or not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


# the bench's own spark-submit jobs (bench/spark_jobs/) import the bench package from the checkout
# (Sharelake's `sharelake` is installed in the venv): its environment puts the checkout on their path
BENCH_JOB_ENV = {"PYTHONPATH": str(PROJECT_ROOT)}


def run_logged(cmd: list[str], log: Path, timeout_s: float, env: dict[str, str] | None = None) -> int:
    """Run `cmd` in its own process group with output to `log`; on timeout kill the group, return -9."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            env={**os.environ, **(env or {})},
        )  # fmt: skip
        try:
            return proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            stop_group(proc)
            return -9


def started_at(log: Path) -> float | None:
    """A bench spark job's `bench-started: <epoch seconds>` line (printed once its SparkSession is up)."""
    m = re.search(r"^bench-started: ([\d.]+)$", log.read_text(errors="replace"), re.MULTILINE)
    return float(m.group(1)) if m else None


def delta_job_result(
    ctx: RunContext,
    name: str,
    code: int,
    log: Path,
    table: Path,
    details: dict[str, float] | None = None,
    launched_at: float | None = None,
) -> RunResult:
    """The RunResult of a finished bench spark job that appended to `table`: rows in the table /
    (its last data commit - its bench-started line); `scheduled_s` from `launched_at` (its process start)."""
    if code != 0:
        return failed(ctx, name, f"{'timed out' if code == -9 else f'exit code {code}'}: {tail(log, 8)}", log)
    started = started_at(log)
    commits = read_commits(table)
    data = data_commits(commits)
    if started is None or not data:
        return failed(ctx, name, f"no bench-started line or no commit: {tail(log, 8)}", log)
    window = data[-1].timestamp_ms / 1000 - started
    details = {"data_commits": float(len(data)), "steady_rate": steady_rate(data) or math.nan, **(details or {})}
    if launched_at is not None:
        details["scheduled_s"] = data[-1].timestamp_ms / 1000 - launched_at
    return RunResult(
        name, ctx.phase, ctx.partitions, ctx.members, True, rows_in(commits), window, "", table, log, details
    )
