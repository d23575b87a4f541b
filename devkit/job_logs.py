"""What a job's log says about the commit race between writers: its re-planned appends and refused commits."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

REPLANNED = ": re-planned, "  # sharelake.sink.batch.table_writer: another writer committed planned records first
REFUSED = ": another writer committed first"  # sharelake.sink.delta.writer: Delta refused a commit


def race_counts(logs: Iterable[Path]) -> tuple[int, int]:
    """(re-planned appends, refused commits) that job logs report: how often the race was met."""
    text = "\n".join(p.read_text(errors="replace") for p in logs if p.exists())
    return text.count(REPLANNED), text.count(REFUSED)
