"""The Spark settings Sharelake needs, in one place, and the SparkSession built with them.

`build_spark` builds the session; `python -m sharelake.run.spark_session --submit-args` prints what must be set before
the driver JVM starts (the log configuration, the class archive's JVM options), for `spark-submit.sh`. So a job
behaves the same whether it is started as the installed `sharelake` command (plain Python: this module launches
the JVM) or through `./spark-submit.sh` (spark-submit launched it).

Precedence, lowest first: `SHARELAKE_CONF` (Delta, Arrow, a quiet console, sizes for a local driver),
what spark-submit was given (`--conf`, a profile's properties file), the job's `[spark_conf]`.

Jars: under spark-submit the session already has its jars (`--jars`, `--packages`, or a cluster
image's). Started from plain Python it takes the jars of the folders its caller gives (the testing
kit's, fetched into its cache), by default those in `SHARELAKE_JARS` (a checkout's `make jars` fills
them); with none, it has Spark resolve `RUNTIME_PACKAGES` from Maven Central once (Ivy's cache keeps
them). Python workers must run the job's interpreter (`PYSPARK_PYTHON`), or they pick the system
Python and fail on missing pyarrow.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path

from pyspark.sql import SparkSession

from sharelake.run.class_archive import java_options

LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")  # warnings only: the job's own lines stay readable


def launch_conf() -> dict[str, str]:
    """What is set before the driver JVM starts: by spark-submit.sh (`--submit-args`), or by
    build_spark when it launches the JVM. The log configuration, and the class archive when there
    is one (`sharelake.run.class_archive`)."""
    options = f"-Dlog4j2.configurationFile=file:{LOG4J_CONFIG} {java_options()}".strip()
    return {"spark.driver.extraJavaOptions": options}


SHARELAKE_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    # the job's own lines, not Spark's stage bars, on the console
    "spark.ui.showConsoleProgress": "false",
    # sized for a local driver (the cluster profiles in conf/spark/ set their own): Delta rebuilds a
    # table's snapshot (and writes its every-10-commits checkpoint) with 50 tasks by default, which
    # costs seconds inside a micro-batch and minutes in a table summary
    "spark.databricks.delta.snapshotPartitions": "4",
    "spark.sql.shuffle.partitions": "4",
    # a Delta commit per micro-batch: keep the streaming checkpoint lean
    "spark.sql.streaming.minBatchesToRetain": "20",
}


# what the Sharelake jobs need beside Spark's own jars: the same artifacts as conf/maven/spark-jars.pom.xml
RUNTIME_PACKAGES = (
    f"io.delta:delta-spark_4.2_2.13:{version('delta-spark')}",
    f"org.apache.spark:spark-avro_2.13:{version('pyspark')}",
    "org.apache.kafka:kafka-clients:4.4.0",  # its Admin: a share group's state (sharelake.consume.group_admin)
)
# kafka-clients' own dependencies that Spark's jars already hold
RUNTIME_EXCLUDES = (
    "com.github.luben:zstd-jni",
    "at.yawk.lz4:lz4-java",
    "org.xerial.snappy:snappy-java",
    "org.slf4j:slf4j-api",
)


def submitted() -> bool:
    """spark-submit started this driver's JVM (its conf and jars are set)."""
    return bool(os.environ.get("SHARELAKE_SUBMITTED") or os.environ.get("PYSPARK_GATEWAY_PORT"))


def env_jar_folders() -> list[Path]:
    """The folders `SHARELAKE_JARS` names (a checkout's `make jars` ones, or the user's own)."""
    return [Path(f) for f in os.environ.get("SHARELAKE_JARS", "").split(os.pathsep) if f]


def jar_conf(folders: Sequence[Path] | None = None) -> dict[str, str]:
    """Where a session started from plain Python gets its jars; nothing under spark-submit. The jars
    of `folders` (by default `SHARELAKE_JARS`'s); with none there, RUNTIME_PACKAGES from Maven Central."""
    if submitted():
        return {}  # spark-submit started the JVM with its jars
    folders = env_jar_folders() if folders is None else folders
    jars = [str(jar) for folder in folders for jar in sorted(folder.glob("*.jar"))]
    if jars:
        return {"spark.jars": ",".join(jars)}
    return {"spark.jars.packages": ",".join(RUNTIME_PACKAGES), "spark.jars.excludes": ",".join(RUNTIME_EXCLUDES)}


def given_to_spark_submit() -> set[str]:
    """The keys spark-submit was given (`--conf`, `--properties-file`): they win over SHARELAKE_CONF."""
    if not os.environ.get("PYSPARK_GATEWAY_PORT"):
        return set()
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # joins spark-submit's JVM; SparkConf() then reads its spark.* properties
    return {key for key, _ in SparkConf().getAll()}


def session_conf(extra_conf: dict[str, str] | None = None, jar_folders: Sequence[Path] | None = None) -> dict[str, str]:
    """What build_spark sets: Sharelake's settings under spark-submit's, under the job's `[spark_conf]`."""
    if submitted():
        given = given_to_spark_submit()
        conf = {k: v for k, v in SHARELAKE_CONF.items() if k not in given}
    else:
        conf = {**SHARELAKE_CONF, **launch_conf(), **jar_conf(jar_folders)}
    return {**conf, **(extra_conf or {})}


def build_spark(
    app_name: str,
    master: str | None = None,
    extra_conf: dict[str, str] | None = None,
    jar_folders: Sequence[Path] | None = None,
) -> SparkSession:
    """The session, named `app_name`; `jar_folders`: where its jars are when not under spark-submit
    (default: `SHARELAKE_JARS`'s folders, else Maven Central through Spark)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    for k, v in session_conf(extra_conf, jar_folders).items():
        builder = builder.config(k, v)
    return builder.getOrCreate()


def submit_args() -> list[str]:
    """spark-submit's arguments for what must be set before the driver JVM starts (spark-submit.sh)."""
    return [arg for key, value in launch_conf().items() for arg in ("--conf", f"{key}={value}")]


if __name__ == "__main__":
    if sys.argv[1:] != ["--submit-args"]:
        sys.exit("usage: python -m sharelake.run.spark_session --submit-args")
    print("\n".join(submit_args()))
