"""Fault injection for the crash and failure tests: inert unless SHARELAKE_FAULTS is set.

Called at named points on the record's path (`sharelake.sink.delta.writer`, `sharelake.sink.delta.merge`,
`sharelake.sink.dedup.dedup_table`, `sharelake.sink.batch.delta_sink`, `sharelake.sink.delta.writer_lease`). The
variable holds comma-separated rules, read at every hit so a test can change it in-process:

    kill@after_delta_commit        SIGKILL this process at the first hit of the point
    kill@after_delta_commit#3      ... at its third hit
    error@before_delta_commit#2    raise InjectedFault at the first 2 hits
    delay@before_delta_commit=3.5  sleep 3.5 s at every hit
    delay@before_delta_commit#3=20 sleep 20 s at the third hit only
    wait@delta_files_written#2=/tmp/go
                                   at the second hit, create /tmp/go.waiting and wait until
                                   /tmp/go exists (at most WAIT_LIMIT_S): a test orders a race by
                                   what it waits for before it creates the file

Points: before_delta_commit (planned; the append's transaction not started), delta_files_written
(its data files written, not committed: nothing references them), before_delta_recommit (Delta
refused the commit for another writer's, the same files about to be committed again),
after_delta_commit (committed, not yet ACCEPTed), delta_post_commit (committed and decided;
Delta's post-commit work done, Sharelake's own not begun), the same for the dead-letter table
(before_dead_letter_commit, ...), before_repair (at start, about to delete duplicate rows an
older version left), after_repair (that DELETE committed, not yet noted by its writer),
before_delta_merge (an upserted table's write about to begin, before its first append too),
after_accept (ACCEPTs committed to Kafka, foreachBatch not yet returned: Spark will re-run this
batch id), before_lease_renewal (the S3 writer lease's renewal thread, about to renew).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ENV = "SHARELAKE_FAULTS"
WAIT_LIMIT_S = 300.0  # a `wait` rule goes on after this long even if its file never appears
_hits: Counter[str] = Counter()
_lock = threading.Lock()
_suspended = threading.local()  # per thread: the warm-up's own writes are not the ones under test


class InjectedFault(RuntimeError):
    """Raised by an `error@point` rule."""


def active(point: str) -> bool:
    """Whether any rule names `point` (so callers can skip work only a fault needs)."""
    return not getattr(_suspended, "on", False) and any(name == point for _, name, _, _ in _rules())


@contextmanager
def suspended() -> Iterator[None]:
    """No fault point fires, or counts a hit, in this thread meanwhile (the start-up warm-up)."""
    _suspended.on = True
    try:
        yield
    finally:
        _suspended.on = False


def hit(point: str) -> None:
    if getattr(_suspended, "on", False):
        return
    rules = [r for r in _rules() if r[1] == point]
    if not rules:
        return
    with _lock:
        _hits[point] += 1
        n = _hits[point]
    for action, _, count, arg in rules:
        if action == "kill" and n == count:
            os.kill(os.getpid(), signal.SIGKILL)
        elif action == "error" and n <= count:
            raise InjectedFault(f"injected failure at {point} (hit {n})")
        elif action == "delay" and count in (0, n):
            time.sleep(float(arg))
        elif action == "wait" and count in (0, n):
            _wait_for_file(Path(arg))


def _wait_for_file(go: Path) -> None:
    """Announce the wait (`<go>.waiting`), then wait until `go` exists or WAIT_LIMIT_S passed."""
    go.with_name(go.name + ".waiting").touch()
    deadline = time.monotonic() + WAIT_LIMIT_S
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.1)


def reset() -> None:
    with _lock:
        _hits.clear()


def _rules() -> list[tuple[str, str, int, str]]:
    """(action, point, count, argument) of each rule: `action@point[#count][=argument]`.

    A missing count is 1 for kill, error and wait, and 0 (every hit) for delay.
    """
    rules = []
    for rule in os.environ.get(ENV, "").split(","):
        action, _, target = rule.strip().partition("@")
        name, _, arg = target.partition("=")
        name, _, count = name.partition("#")
        if name:
            rules.append((action, name, int(count) if count else (0 if action == "delay" else 1), arg))
    return rules
