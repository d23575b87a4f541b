"""Reads a Delta table's commit log (`_delta_log/*.json` commitInfo actions) without Spark.

Called by the contenders (the time of the last commit, rows written, commit intervals) and by the
latency phase (has every produced row landed yet?). Delta writes one JSON file per commit and keeps
them for the log retention period (30 days) even after a checkpoint, so every commit is there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Commit:
    version: int
    timestamp_ms: int  # commitInfo.timestamp: when the writer committed
    operation: str
    output_rows: int  # operationMetrics.numOutputRows of a WRITE / STREAMING UPDATE, else 0
    deleted_rows: int  # operationMetrics.numDeletedRows of a DELETE, else 0
    user_metadata: dict[str, Any]


def _commit(version: int, info: dict[str, Any]) -> Commit:
    metrics = info.get("operationMetrics") or {}
    operation = str(info.get("operation", ""))
    out = int(metrics.get("numOutputRows", 0)) if operation in ("WRITE", "STREAMING UPDATE") else 0
    try:
        meta = json.loads(info["userMetadata"]) if info.get("userMetadata") else {}
    except (TypeError, ValueError):
        meta = {}
    return Commit(version, int(info.get("timestamp", 0)), operation, out, int(metrics.get("numDeletedRows", 0)), meta)


def read_commits(table: Path) -> list[Commit]:
    """Every commit of the table in version order; [] when the table does not exist yet."""
    log_dir = table / "_delta_log"
    if not log_dir.is_dir():
        return []
    commits = []
    for f in sorted(log_dir.glob("*.json")):
        if not f.stem.isdigit():
            continue
        try:
            lines = f.read_text().splitlines()
        except FileNotFoundError:
            continue
        for line in lines:
            if '"commitInfo"' in line:
                commits.append(_commit(int(f.stem), json.loads(line)["commitInfo"]))
                break
    return commits


def rows_in(commits: list[Commit]) -> int:
    """Rows the commits leave in the table (appended minus deleted), from metadata only."""
    return sum(c.output_rows - c.deleted_rows for c in commits)


def data_commits(commits: list[Commit]) -> list[Commit]:
    return [c for c in commits if c.output_rows > 0]


def mean_commit_interval_s(commits: list[Commit]) -> float | None:
    """Mean time between consecutive data commits (a proxy for the batch cycle), None if < 2."""
    data = data_commits(commits)
    if len(data) < 2:
        return None
    return (data[-1].timestamp_ms - data[0].timestamp_ms) / 1000 / (len(data) - 1)
