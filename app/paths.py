"""Where the project keeps what it installs: the git-ignored cache and the jar folders.

Called by the Spark session builder, the embedded broker and the jobs; `make jars` fills the
folders named here from the Maven poms under conf/maven/.
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
# the unpacked Apicurio Registry distribution (a runner jar and its lib/), for the embedded schema registry
REGISTRY_DIR = CACHE_DIR / "registry"


def jars_in(folder: Path) -> list[Path]:
    """The jars of one cache folder, sorted; raise with the fix if `make jars` has not run."""
    jars = sorted(folder.glob("*.jar"))
    if not jars:
        raise FileNotFoundError(f"no jars in {folder}: run `make jars` (Maven resolves them once)")
    return jars
