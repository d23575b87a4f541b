"""What the benchmark ran on: cores, memory, OS, Java, Python and the versions of every part.

A report's machine section (`machine_facts`), and the load average (`load_average`).
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import confluent_kafka
import psutil

from bench.settings import BENCH_JARS
from devkit.paths import KAFKA_JARS


def _pkg(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def _java() -> str:
    try:
        done = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unknown ({e})"
    return " / ".join(ln.strip() for ln in done.stderr.splitlines()[:2])


def _os() -> str:
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return f"{line.split('=', 1)[1].strip().strip(chr(34))} ({platform.release()})"
    except OSError:
        pass
    return platform.platform()


def _jars(folder: Path) -> str:
    jars = sorted(p.name for p in folder.glob("*.jar"))
    return ", ".join(jars) if jars else "none"


def load_average() -> str:
    """The load average over 1, 5 and 15 minutes: `1.52, 1.20, 0.98`."""
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def machine_facts() -> dict[str, str]:
    vm = psutil.virtual_memory()
    load = load_average()
    kafka_jars = [p.name for p in KAFKA_JARS.glob("kafka_2.13-*.jar")]
    return {
        "CPU cores (logical / physical)": f"{psutil.cpu_count()} / {psutil.cpu_count(logical=False)}",
        "CPU": platform.processor() or platform.machine(),
        "RAM": f"{vm.total / 2**30:.1f} GiB ({vm.available / 2**30:.1f} GiB available at start)",
        "load average at start (1, 5, 15 min)": load,
        "OS": _os(),
        "Java": _java(),
        "Python": sys.version.split()[0],
        "pyspark": _pkg("pyspark"),
        "delta-spark": _pkg("delta-spark"),
        "confluent-kafka / librdkafka": f"{_pkg('confluent-kafka')} / {confluent_kafka.libversion()[0]}",
        "Kafka broker": ", ".join(kafka_jars) or "unknown",
        "Spark Kafka source jars": _jars(BENCH_JARS),
    }
