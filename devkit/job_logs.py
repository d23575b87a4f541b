"""What a job's log says: the commit race between writers (its re-planned appends and refused commits),
its start and `run ended:` counters, and its micro-batches' progress lines."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

REPLANNED = ": re-planned, "  # sharelake.sink.batch.table_writer: another writer committed planned records first
REFUSED = ": another writer committed first"  # sharelake.sink.delta.writer: Delta refused a commit


def race_counts(logs: Iterable[Path]) -> tuple[int, int]:
    """(re-planned appends, refused commits) that job logs report: how often the race was met."""
    text = "\n".join(p.read_text(errors="replace") for p in logs if p.exists())
    return text.count(REPLANNED), text.count(REFUSED)


_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def log_time(line: str) -> float | None:
    """The epoch seconds of a Python logging line (`%(asctime)s`, local time) or None."""
    m = _LOG_TIME.match(line)
    if m is None:
        return None
    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()


@dataclass
class JobLog:
    started: float | None  # epoch seconds when run_ingest started: the "run ended:" line - seconds
    summary: dict[str, float]  # the "run ended:" counters (RunSummary), {} when missing


def parse_job_log(log: Path) -> JobLog:
    """The job's start and its `run ended: k=v ...` counters, from its log (none when it has no log yet)."""
    started, summary = None, {}
    for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
        m = re.search(r"run ended: (.*)", line)
        if m:
            summary = {k: float(v) for k, v in (kv.split("=", 1) for kv in m.group(1).split())}
            ended = log_time(line)
            started = ended - summary["seconds"] if ended is not None and "seconds" in summary else None
    return JobLog(started, summary)


PROGRESS = re.compile(
    r"batch (?P<batch>\d+): in=(?P<records>\d+) .*?duration_ms=(?P<duration>\d+) .*?\| sink_ms (?P<sink>[^|]*)"
    r"\| spark_ms (?P<spark>.*)$"
)
SPARK_STEPS = {"walCommit": "offset log (walCommit)", "commitOffsets": "commit log (commitOffsets)"}


def _pairs(text: str) -> dict[str, float]:
    return {k: float(v) for k, v in re.findall(r"(\w+)=(\d+)", text)}


def progress_batches(job_log: Path) -> dict[int, dict[str, float]]:
    """batch id -> {records, total, spark.<step>, sink.<step>} from the job's progress lines."""
    out: dict[int, dict[str, float]] = {}
    for line in job_log.read_text(errors="replace").splitlines():
        m = PROGRESS.search(line)
        if m is None:
            continue
        row = {"records": float(m["records"]), "total": float(m["duration"])}
        row |= {f"sink.{k}": v for k, v in _pairs(m["sink"]).items()}
        spark = _pairs(m["spark"])
        row |= {f"spark.{k}": v for k, v in spark.items() if k in SPARK_STEPS}
        row["spark.other"] = sum(v for k, v in spark.items() if k not in SPARK_STEPS)
        out[int(m["batch"])] = row
    return out
