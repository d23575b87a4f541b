"""The parts of a JVM's time in an async-profiler collapsed-stack profile (`-o collapsed`, with `-t`).

Each stack goes to the first part in `PARTS` whose pattern any of its frames holds, else to `other`.
The parts are ordered from the most specific: a Parquet write inside a task is the Parquet writer's,
the rest of a task's stack the task's, not the scheduler's; with `-t` the stack's root frame is its
thread, which names the JIT's, the GC's and the process reaper's. Run as
`python -m bench.jvm_profile PROFILE.collapsed` it prints the parts' shares of the samples.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

# (part, a regex any frame of the stack may match), first match wins
PARTS: tuple[tuple[str, str], ...] = (
    # Hadoop's local file system forks `readlink`/`chmod` (no native library): a process per call
    ("hadoop local fs: shell forks", r"hadoop\.util\.Shell|^\[?process reaper"),
    ("gc", r"^\[?(GC|G1|ParallelGC|ConcurrentGC|VM Thread)|G1[A-Z]\w+::|CollectedHeap::"),
    ("jit", r"^\[?(C1|C2) CompilerThre|CompileBroker::|Compile::"),
    ("delta: checksum, post-commit", r"delta\.[\w.]*(Checksum|postCommit|PostCommit|Checkpoint)"),
    (
        "delta: commit file, conflict check",
        r"delta\.[\w.]*(doCommit|ConflictChecker|checkForConflicts|writeCommitFile|LogStore)",
    ),
    ("delta: snapshot, log listing", r"delta\.[\w.]*(Snapshot|DeltaLog\.update|listFrom|LogSegment)"),
    (
        "parquet: writer and statistics",
        r"org\.apache\.parquet|ParquetOutputWriter|DeltaJobStatisticsTracker|StatisticsTracker",
    ),
    ("json parse", r"JsonToStructs|JacksonParser|jackson"),
    (
        "python runner: arrow to/from python",
        r"api\.python\.|PythonRunner|PythonArrow|ArrowPython|MapInBatch|ArrowWriter|ArrowColumnVector"
        r"|org\.apache\.arrow",
    ),
    (
        "spark sql: analysis, optimizer, planning",
        r"catalyst\.(analysis|optimizer|rules|trees)|SparkPlanner|AdaptiveSparkPlan|CodeGenerator|codegen"
        r"|QueryExecution\.(analyzed|optimizedPlan|sparkPlan|executedPlan|assertAnalyzed)",
    ),
    ("task: executor run, (de)serialization", r"executor\.Executor|TaskRunner|serializer\.|ClosureCleaner"),
    (
        "scheduler: DAG, task launch, RPC",
        r"scheduler\.|TaskSetManager|LocalEndpoint|rpc\.|netty|Dispatcher|BlockManager|broadcast\.",
    ),
    ("py4j", r"py4j"),
    ("event log, listeners", r"EventLoggingListener|LiveListenerBus|AsyncEventQueue|JsonProtocol"),
)
_COMPILED = tuple((part, re.compile(pattern)) for part, pattern in PARTS)


def part_of(frames: list[str]) -> str:
    """The part a stack (root first) belongs to (a Java frame's class named with dots or slashes)."""
    dotted = [frame.replace("/", ".") for frame in frames]
    for part, pattern in _COMPILED:
        if any(pattern.search(frame) for frame in dotted):
            return part
    return "other"


def parts(collapsed: str) -> Counter[str]:
    """Samples by part in a collapsed profile's text (lines `frame;frame;... count`)."""
    out: Counter[str] = Counter()
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if count.isdigit():
            out[part_of(stack.split(";"))] += int(count)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("profile", type=Path)
    args = p.parse_args()
    samples = parts(args.profile.read_text(errors="replace"))
    total = sum(samples.values()) or 1
    for part, n in samples.most_common():
        print(f"{100 * n / total:5.1f}%  {n:8d}  {part}")
    print(f"        {total:8d}  samples")


if __name__ == "__main__":
    main()
