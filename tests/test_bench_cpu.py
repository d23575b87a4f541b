"""The bench's CPU accounting (`devkit.proccpu.CpuAccount`) on real child processes, and its report's
cells (`bench.cpu_report`): no broker, no Spark.

A child named `java` (its main thread renamed) burns a known CPU time in a thread named as Spark's
task threads are and another in a thread of its own, then ends its threads and exits; a second child
started before the window stands for the broker and burns a known time inside it. The split must put
each burn where the bench's report says it goes, the ended threads included, within a tolerance.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from bench.contenders import RunResult
from bench.cpu_report import cpu_json, cpu_section
from bench.settings import BenchSettings
from devkit.proccpu import KINDS, CpuAccount

NAMED_BURNS = """
import ctypes, sys, threading, time
prctl = ctypes.CDLL(None).prctl
def name(text):
    prctl(15, text.encode(), 0, 0, 0)  # PR_SET_NAME: the kernel keeps 15 characters
def burn(label, seconds, hold):
    name(label)
    start = time.thread_time()
    while time.thread_time() - start < seconds:
        pass
    time.sleep(hold)  # a task thread lives on in Spark's pool; then it ends, as threads do
name(sys.argv[1])
for label, seconds in (("Executor task launch worker for task 0.0", 0.5), ("other-burner", 0.3)):
    t = threading.Thread(target=burn, args=(label, seconds, 0.4))
    t.start()
    t.join()
time.sleep(0.5)
"""

BROKER = """
import time
time.sleep(0.3)
start = time.process_time()
while time.process_time() - start < 0.4:
    pass
time.sleep(60)
"""

TOLERANCE_S = 0.15


def test_the_split_puts_each_threads_burn_in_its_kind() -> None:
    broker = subprocess.Popen([sys.executable, "-c", BROKER])
    try:
        time.sleep(0.2)  # the broker's interpreter start-up is before the window
        account = CpuAccount(broker=broker.pid, interval_s=0.1)
        account.start()
        subprocess.run([sys.executable, "-c", NAMED_BURNS, "java"], check=True, timeout=60)
        split = account.stop()
    finally:
        broker.kill()
        broker.wait()
    executors = split.threads["jvm/Executor task l"]
    assert abs(executors - 0.5) < TOLERANCE_S, split
    assert abs(split.threads["jvm/other-burner"] - 0.3) < TOLERANCE_S, split
    assert abs(split.executors - 0.5) < TOLERANCE_S, split  # both threads ended before the process did
    assert 0.3 - TOLERANCE_S < split.driver_jvm < 0.3 + 0.3, split  # the other burn plus the interpreter's start
    assert split.driver_python == 0.0, split
    assert abs(split.broker - 0.4) < TOLERANCE_S, split
    assert split.other < TOLERANCE_S, split  # what ran between the last sample and the exit
    job = split.total - split.broker
    assert 0.8 - TOLERANCE_S < job < 0.8 + 0.4, split
    details = split.as_details()
    assert {f"cpu_{k}_s" for k in KINDS} | {"cpu_total_s"} <= set(details)
    assert details["cpu_thread:jvm/Executor task l_s"] == executors  # the busiest thread groups follow


def test_a_python_process_is_the_driver_python() -> None:
    account = CpuAccount(interval_s=0.1)
    account.start()
    subprocess.run([sys.executable, "-c", NAMED_BURNS, "python3"], check=True, timeout=60)
    split = account.stop()
    assert split.executors == 0.0, split  # task-named threads outside a JVM are not executors
    assert 0.8 - TOLERANCE_S < split.driver_python < 0.8 + 0.3, split  # the burns plus the interpreter's start
    assert abs(split.threads["python/Executor task l"] - 0.5) < TOLERANCE_S, split
    assert split.broker == 0.0, split


def test_the_report_gives_the_median_per_million_of_each_delta_contenders_cell() -> None:
    def run(name: str, total: float, table: Path | None = Path("t")) -> RunResult:
        seconds = {f"cpu_{k}_s": total / 5 for k in KINDS} | {"cpu_total_s": total}
        return RunResult(name, "throughput", 4, 4, True, 100_000, 10.0, table=table, details=seconds, expected=100_000)

    s = replace(BenchSettings(), contenders=("sharelake", "share-consumer-drain"), partitions=(4,))
    results = [
        run("sharelake", 30.0),
        run("sharelake", 40.0),
        run("sharelake", 20.0),
        run("share-consumer-drain", 9.0, None),
    ]
    [cell] = cpu_json(results, s)  # the plain drain writes no table: it runs in the bench's own process
    assert cell["contender"] == "sharelake" and cell["runs"] == 3
    assert cell["cpu_s_per_million"]["total"] == 300.0 and cell["cpu_s_per_million"]["broker"] == 60.0
    assert "| (a) Sharelake | 4 | 3 | 60.0 | 60.0 | 60.0 | 60.0 | 60.0 | 300.0 |" in "\n".join(cpu_section(results, s))
