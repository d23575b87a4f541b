"""Peak memory of a process tree, split into JVM and Python RSS, sampled in a background thread.

For a Sharelake job the spark-submit JVM is the tree's root and the Python driver its child (psutil
walks the children at every sample, so processes started later are counted too). `TreeSampler`
keeps the peak; `tree_rss` is one sample, for a caller that keeps a series.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import psutil

MIB = 1024 * 1024


@dataclass
class MemoryPeak:
    jvm_mib: float = 0.0  # max over samples of the summed RSS of the tree's java processes
    python_mib: float = 0.0  # the same for its python processes
    total_mib: float = 0.0  # max over samples of the whole tree's RSS
    samples: int = 0


def _kind(proc: psutil.Process) -> str:
    try:
        name = proc.name().lower()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return "gone"
    if name.startswith("java"):
        return "jvm"
    if name.startswith("python"):
        return "python"
    return "other"


class TreeSampler(threading.Thread):
    """Samples the RSS of `pid` and its descendants every `interval_s` until `stop()`."""

    def __init__(self, pid: int, interval_s: float = 0.5) -> None:
        super().__init__(name=f"bench-mem-{pid}", daemon=True)
        self.pid, self.interval_s = pid, interval_s
        self.peak = MemoryPeak()
        self._halt = threading.Event()

    def stop(self) -> MemoryPeak:
        self._halt.set()
        self.join(timeout=5)
        return self.peak

    def run(self) -> None:
        while not self._halt.is_set():
            self._sample()
            self._halt.wait(self.interval_s)

    def _sample(self) -> None:
        rss = tree_rss(self.pid)
        if rss is None:
            return
        pk = self.peak
        pk.jvm_mib = max(pk.jvm_mib, rss["jvm"] / MIB)
        pk.python_mib = max(pk.python_mib, rss["python"] / MIB)
        pk.total_mib = max(pk.total_mib, sum(rss.values()) / MIB)
        pk.samples += 1


def tree_rss(pid: int) -> dict[str, int] | None:
    """RSS bytes of `pid` and its descendants by kind ("jvm", "python", "other"); None once it is gone."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return None
    rss = {"jvm": 0, "python": 0, "other": 0}
    for p in procs:
        kind = _kind(p)
        try:
            if kind != "gone":
                rss[kind] += p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return rss
