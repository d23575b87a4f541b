"""The checkout's paths: the project root, the git-ignored cache and the jar folders, venvs and archives in it.

The cache is `SHARELAKE_CACHE`, else .cache. For the embedded services, the demo, the tests and the bench,
never for the runtime package: an installed Sharelake finds its jars through spark-submit's `--jars`,
`SHARELAKE_JARS`, or Maven Central, see `sharelake.run.spark_session`. `make jars` (part of `make setup`)
fills the Kafka, Spark and registry folders from conf/maven/; `make s3` and `make yarn` the S3 and
YARN ones (the comment beside each name says which target fills it).
"""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CACHE_DIR = Path(os.environ.get("SHARELAKE_CACHE", PROJECT_ROOT / ".cache"))
KAFKA_JARS = CACHE_DIR / "jars" / "kafka"
# the oldest Kafka broker Sharelake supports (the newest 4.2.x), for the floor test
KAFKA_FLOOR_JARS = CACHE_DIR / "jars" / "kafka-floor"
SPARK_JARS = CACHE_DIR / "jars" / "spark"
# Delta tables on S3: the S3A connector and the AWS SDK's S3 modules (`make s3`), on Spark's classpath when present
S3_JARS = CACHE_DIR / "jars" / "s3"
# an S3 API server (S3Proxy) for the tests and the bench (`make s3`)
S3_SERVER_JARS = CACHE_DIR / "jars" / "s3-server"
# a YARN cluster and HDFS (Hadoop's mini clusters) for the YARN tests (`make yarn`)
YARN_JARS = CACHE_DIR / "jars" / "yarn"
# the unpacked Apicurio Registry distribution (a runner jar and its lib/), for the embedded schema registry
REGISTRY_DIR = CACHE_DIR / "registry"
# the driver JVM's class-data-sharing archives (`make setup` builds one: sharelake.run.class_archive)
CLASS_ARCHIVES = CACHE_DIR / "cds"
# the runtime venv a cluster runs: requirements.txt and the wheel only (`make runtime-env`)
RUNTIME_VENV = CACHE_DIR / "runtime"
# a user's test environment: the wheel with its testing kit, nothing else (`make testing-env`)
TESTING_VENV = CACHE_DIR / "testing-env"
# the checkout's venv (pinned runtime, test and bench packages; Sharelake installed editable)
VENV_BIN = CACHE_DIR / "venv" / "bin"


def jars_env() -> str:
    """`SHARELAKE_JARS` for a job started from this checkout: the jar folders `make jars` / `make s3` filled."""
    return os.pathsep.join(str(f) for f in (SPARK_JARS, S3_JARS) if f.is_dir())
