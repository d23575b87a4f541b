"""`sharelake version`: Sharelake's version and those of the parts it runs on (no JVM is started)."""

from __future__ import annotations

import argparse
from importlib.metadata import version
from pathlib import Path

import confluent_kafka

HELP = "print the versions of Sharelake, PySpark, delta-spark and confluent-kafka (librdkafka)"


def configure(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    where = Path(__file__).parent.parent
    print(
        f"sharelake {version('sharelake')} (from {where}), pyspark {version('pyspark')}, "
        f"delta-spark {version('delta-spark')}, "
        f"confluent-kafka {confluent_kafka.version()} (librdkafka {confluent_kafka.libversion()[0]})"
    )
    return 0
