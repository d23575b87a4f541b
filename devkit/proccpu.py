"""CPU seconds (user + system) of a job's processes between two moments, split by process and thread.

`CpuAccount` watches the processes started under a root (by default this one) while it runs, every
`interval_s` from a background thread, and a broker process (or none) beside them:

- `broker`: the broker's own CPU, its reading at `stop()` minus the one at `start()` (it outlives the
  window, so the difference is exact);
- `driver_python`: the Python processes (Spark's Python workers, `pyspark.daemon` / `pyspark.worker`,
  count as executors);
- `driver_jvm`: the JVM processes, less their executor threads;
- `executors`: the JVM threads whose name starts with `Executor task ` (Spark's task threads, which
  are the executors in local mode; the kernel keeps only the start of a thread's name);
- `other`: the rest of the job's CPU: its shell wrappers, Spark's launcher JVM, and whatever ran
  between a process's last sample and its exit.

A process's CPU is its `/proc/<pid>/stat` reading (it includes its ended threads); a thread's is
`/proc/<pid>/task/<tid>/stat`. Processes and threads vanish from /proc when they end, so the last
value seen of each is kept. The job's whole CPU is exact where its processes are reaped in a chain
back to this one (the job's `wait`): the growth of this process's children's rusage over the window;
`other` is that total less what the samples saw (never below zero).
"""

from __future__ import annotations

import os
import re
import resource
import threading
from dataclasses import dataclass, field

import psutil

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
EXECUTOR_THREAD = "Executor task "  # Spark's task threads: "Executor task launch worker for task ..."
PYTHON_WORKER = ("pyspark.daemon", "pyspark.worker")
KINDS = ("broker", "driver_python", "driver_jvm", "executors", "other")
BUSIEST = 8  # thread groups kept per run, the busiest first


@dataclass
class CpuSplit:
    """CPU seconds of one window by kind (`KINDS`), and by thread name of the job's processes."""

    broker: float = 0.0
    driver_python: float = 0.0
    driver_jvm: float = 0.0  # without the executor threads
    executors: float = 0.0
    other: float = 0.0
    threads: dict[str, float] = field(default_factory=dict)  # "<process kind>/<thread name>" -> seconds

    @property
    def total(self) -> float:
        return self.broker + self.driver_python + self.driver_jvm + self.executors + self.other

    def as_details(self, prefix: str = "cpu_") -> dict[str, float]:
        """`{prefix}<kind>_s` per kind and `{prefix}total_s`, then `{prefix}thread:<group>_s` for the
        `BUSIEST` thread groups (`thread_groups`), for a run's details."""
        seconds = {kind: getattr(self, kind) for kind in KINDS} | {"total": self.total}
        busiest = sorted(self.thread_groups().items(), key=lambda kv: -kv[1])[:BUSIEST]
        return {f"{prefix}{kind}_s": value for kind, value in seconds.items()} | {
            f"{prefix}thread:{group}_s": value for group, value in busiest
        }

    def thread_groups(self) -> dict[str, float]:
        """The threads' seconds summed by name without its trailing number (`jvm/GC Thread#0` and
        `jvm/GC Thread#1` are `jvm/GC Thread`)."""
        groups: dict[str, float] = {}
        for label, value in self.threads.items():
            group = re.sub(r"[-#\d]+$", "", label)
            groups[group] = groups.get(group, 0.0) + value
        return groups


@dataclass
class ProcessSeen:
    """The last reading of one process: its kind, its CPU ticks, and each thread's name and ticks."""

    kind: str  # "python", "jvm", "worker" (a Spark Python worker) or "other"
    ticks: int = 0
    threads: dict[int, tuple[str, int]] = field(default_factory=dict)


def stat_of(path: str) -> tuple[str, int, int] | None:
    """(name, utime + stime ticks, start time ticks) of a `/proc/.../stat` file; None once it is gone."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    name, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
    return name, int(rest[11]) + int(rest[12]), int(rest[19])  # fields 14, 15 and 22 of proc(5)


def kind_of(proc: psutil.Process) -> str | None:
    """A process's kind by its name and command line; None once it is gone."""
    try:
        name = proc.name().lower()
        if name.startswith("java"):
            return "jvm"
        if name.startswith("python"):
            argv = " ".join(proc.cmdline())
            return "worker" if any(w in argv for w in PYTHON_WORKER) else "python"
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    return "other"


def child_with(*words: str) -> int | None:
    """The pid of a child of this process whose command line holds every one of `words` (the broker's JVM)."""
    for child in psutil.Process().children():
        try:
            argv = " ".join(child.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if all(w in argv for w in words):
            return int(child.pid)
    return None


def process_seconds(pid: int | None) -> float:
    """CPU seconds (user + system) of one live process itself (0 for None or a process that is gone)."""
    if pid is None:
        return 0.0
    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.NoSuchProcess:
        return 0.0
    return float(t.user + t.system)


def children_seconds() -> float:
    """CPU seconds of this process's reaped descendants so far (their rusage, summed up the wait chain)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


class CpuAccount(threading.Thread):
    """Samples the CPU of the processes under `root` (not `broker` nor its tree) until `stop()`."""

    def __init__(self, root: int | None = None, broker: int | None = None, interval_s: float = 0.5) -> None:
        super().__init__(name="bench-cpu", daemon=True)
        self.root, self.broker, self.interval_s = root or os.getpid(), broker, interval_s
        self.seen: dict[tuple[int, int], ProcessSeen] = {}  # (pid, start time) -> last reading
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self._broker_at = self._children_at = 0.0
        self._skip: set[int] = set()  # processes running at the start (the broker, a helper): not the job's

    def start(self) -> None:
        self._broker_at, self._children_at = process_seconds(self.broker), children_seconds()
        self._skip = self._present()
        super().start()

    def stop(self) -> CpuSplit:
        """The split from `start()` until now (the job's processes reaped by then)."""
        self._halt.set()
        self.join(timeout=10)
        self.sample()
        return self.split(process_seconds(self.broker) - self._broker_at, children_seconds() - self._children_at)

    def run(self) -> None:
        while not self._halt.is_set():
            self.sample()
            self._halt.wait(self.interval_s)

    def _present(self) -> set[int]:
        try:
            return {p.pid for p in psutil.Process(self.root).children(recursive=True)}
        except psutil.NoSuchProcess:
            return set()

    def sample(self) -> None:
        """Read every watched process and its threads now, keeping the last values of those gone."""
        try:
            procs = [p for p in psutil.Process(self.root).children(recursive=True) if p.pid not in self._skip]
        except psutil.NoSuchProcess:
            return
        with self._lock:
            for proc in procs:
                self._read(proc)

    def _read(self, proc: psutil.Process) -> None:
        own = stat_of(f"/proc/{proc.pid}/stat")
        if own is None:
            return
        key = (proc.pid, own[2])
        seen = self.seen.setdefault(key, ProcessSeen("other"))
        seen.kind = kind_of(proc) or seen.kind  # the last one seen: a shell's process may exec the JVM
        seen.ticks = max(seen.ticks, own[1])
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{proc.pid}/task")]
        except OSError:
            return
        for tid in tids:
            thread = stat_of(f"/proc/{proc.pid}/task/{tid}/stat")
            if thread is not None:
                seen.threads[tid] = thread[:2]

    def split(self, broker_s: float, reaped_s: float) -> CpuSplit:
        """The kinds' seconds from the readings kept; `reaped_s`: the job's exact total, if known."""
        out = CpuSplit(broker=max(broker_s, 0.0))
        with self._lock:
            for seen in self.seen.values():
                executor = sum(t for name, t in seen.threads.values() if name.startswith(EXECUTOR_THREAD))
                executor = executor if seen.kind == "jvm" else 0
                for name, ticks in seen.threads.values():
                    label = f"{seen.kind}/{name}"
                    out.threads[label] = out.threads.get(label, 0.0) + ticks / TICKS_PER_S
                whole = seen.ticks / TICKS_PER_S
                if seen.kind == "jvm":
                    out.executors += executor / TICKS_PER_S
                    out.driver_jvm += whole - executor / TICKS_PER_S
                elif seen.kind == "worker":
                    out.executors += whole
                elif seen.kind == "python":
                    out.driver_python += whole
                else:
                    out.other += whole
        sampled = out.driver_python + out.driver_jvm + out.executors + out.other
        out.other += max(reaped_s - sampled, 0.0)
        return out
