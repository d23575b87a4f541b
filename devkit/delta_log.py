"""Reads a Delta table's commit log (`_delta_log/*.json`: commitInfo and add actions) without Spark.

The time of each commit, the rows written, commit intervals, and which version wrote each data file.
Delta writes one JSON file per commit and keeps
them for the log retention period (30 days) even after a checkpoint, so every commit is there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse


@dataclass(frozen=True)
class Commit:
    version: int
    timestamp_ms: int  # commitInfo.timestamp: when the writer committed
    operation: str
    # rows a WRITE / STREAMING UPDATE added (operationMetrics.numOutputRows; a commit retried on a new
    # transaction after a conflict carries no metrics: its add actions' stats.numRecords), else 0
    output_rows: int
    deleted_rows: int  # operationMetrics.numDeletedRows of a DELETE, else 0
    user_metadata: dict[str, Any]


def _commit(version: int, info: dict[str, Any], lines: list[str]) -> Commit:
    metrics = info.get("operationMetrics") or {}
    operation = str(info.get("operation", ""))
    out = 0
    if operation in ("WRITE", "STREAMING UPDATE"):
        out = int(metrics["numOutputRows"]) if "numOutputRows" in metrics else _added_records(lines)
    try:
        meta = json.loads(info["userMetadata"]) if info.get("userMetadata") else {}
    except (TypeError, ValueError):
        meta = {}
    return Commit(version, int(info.get("timestamp", 0)), operation, out, int(metrics.get("numDeletedRows", 0)), meta)


def _added_records(lines: list[str]) -> int:
    """Rows the commit's add actions hold, from each file's stats (Delta writes numRecords by default)."""
    adds = (json.loads(line)["add"] for line in lines if line.startswith('{"add"'))
    return sum(int(json.loads(a.get("stats") or "{}").get("numRecords", 0)) for a in adds)


def _log_files(table: Path) -> list[tuple[int, list[str]]]:
    """(version, lines) of every commit file of the table, in version order."""
    log_dir = table / "_delta_log"
    if not log_dir.is_dir():
        return []
    out = []
    for f in sorted(log_dir.glob("*.json")):
        if not f.stem.isdigit():
            continue
        try:
            out.append((int(f.stem), f.read_text().splitlines()))
        except FileNotFoundError:
            continue
    return out


def read_commits(table: Path) -> list[Commit]:
    """Every commit of the table in version order; [] when the table does not exist yet."""
    commits = []
    for version, lines in _log_files(table):
        for line in lines:
            if '"commitInfo"' in line:
                commits.append(_commit(version, json.loads(line)["commitInfo"], lines))
                break
    return commits


class CommitTail:
    """Reads a growing table's commits incrementally: each `new()` returns only the versions written
    since the last call (a soak samples its table every few seconds for hours)."""

    def __init__(self, table: Path) -> None:
        self.log_dir = table / "_delta_log"
        self.next_version = 0

    def new(self) -> list[Commit]:
        out: list[Commit] = []
        while True:
            f = self.log_dir / f"{self.next_version:020d}.json"
            try:
                lines = f.read_text().splitlines()
            except FileNotFoundError:
                return out
            info = next((json.loads(line)["commitInfo"] for line in lines if '"commitInfo"' in line), None)
            if info is None:  # being written (Delta writes it whole, but a reader can race the rename)
                return out
            out.append(_commit(self.next_version, info, lines))
            self.next_version += 1


def longest_open_write_s(table: Path) -> float:
    """The longest any data file existed before the commit that added it (its mtime to commitInfo.timestamp):
    the shortest VACUUM retention that cannot delete a file of a write still under way."""
    longest = 0.0
    for _, lines in _log_files(table):
        actions = [json.loads(line) for line in lines if line.strip()]
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), None)
        for a in actions:
            if info is not None and "add" in a:
                longest = max(longest, (int(info["timestamp"]) - int(a["add"]["modificationTime"])) / 1000)
    return longest


def relative_data_path(path: str, table: Path) -> str:
    """A data file's path relative to the table root, decoded, from an add action's path (relative and
    URL-encoded, or an absolute URI) or from Spark's `_metadata.file_path` (an absolute, encoded URI)."""
    parsed = urlparse(path)
    if not parsed.scheme and not path.startswith("/"):
        return unquote(path)
    absolute = Path(unquote(parsed.path))
    for root in (table.absolute(), table.resolve()):
        for candidate in (absolute, absolute.resolve()):
            try:
                return candidate.relative_to(root).as_posix()
            except ValueError:
                continue
    return absolute.as_posix()  # outside the table (a shallow clone's file): its absolute path


def added_files(table: Path) -> dict[str, int]:
    """Every data file the log ever added -> the version whose `add` action added it first; the
    paths as `relative_data_path` gives them. Files a later commit removed stay in the map."""
    out: dict[str, int] = {}
    for version, lines in _log_files(table):
        for line in lines:
            if not line.lstrip().startswith('{"add"'):
                continue
            add = json.loads(line).get("add")
            if add and "path" in add:
                out.setdefault(relative_data_path(str(add["path"]), table), version)
    return out


def rows_in(commits: list[Commit]) -> int:
    """Rows the commits leave in the table (appended minus deleted), from metadata only."""
    return sum(c.output_rows - c.deleted_rows for c in commits)


def data_commits(commits: list[Commit]) -> list[Commit]:
    return [c for c in commits if c.output_rows > 0]


def steady_rate(commits: list[Commit]) -> float | None:
    """Rows/s of a drain's steady state: the rows the data commits after the first wrote / the time from the
    first data commit to the last (start-up and the first batch left out); None with fewer than 2."""
    data = data_commits(commits)
    if len(data) < 2 or data[-1].timestamp_ms <= data[0].timestamp_ms:
        return None
    return sum(c.output_rows for c in data[1:]) / ((data[-1].timestamp_ms - data[0].timestamp_ms) / 1000)


def mean_commit_interval_s(commits: list[Commit]) -> float | None:
    """Mean time between consecutive data commits (a proxy for the batch cycle), None if < 2."""
    data = data_commits(commits)
    if len(data) < 2:
        return None
    return (data[-1].timestamp_ms - data[0].timestamp_ms) / 1000 / (len(data) - 1)
