"""The testing kit's lock files, written from what Maven resolved for the checkout.

`app/sharelake/testing/kafka-broker.lock` pins every jar of `.cache/jars/kafka/` (conf/maven/kafka-broker.pom.xml),
`app/sharelake/testing/spark-jars.lock` every jar of `.cache/jars/spark/` (conf/maven/spark-jars.pom.xml: Delta,
spark-avro, the Kafka client) and `app/sharelake/testing/schema-registry.lock` the Apicurio archive
(conf/maven/schema-registry.pom.xml), by their coordinates in the local Maven repository and their
SHA-1: an installed kit fetches exactly the files the checkout's tests run. `python -m
devkit.artifact_locks` rewrites them after a pom changes (`make jars` first);
tests/test_testing_kit.py checks they still match.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from devkit.paths import CACHE_DIR, KAFKA_JARS, PROJECT_ROOT, SPARK_JARS
from sharelake.testing.maven_artifacts import Artifact

M2 = CACHE_DIR / "m2"
LOCKS = PROJECT_ROOT / "app" / "sharelake" / "testing"
HEADER = "# written by `python -m devkit.artifact_locks` from {source}: group:name:version[:classifier][@ext] sha1\n"


def artifact_of(file: Path, m2: Path = M2) -> Artifact:
    """The artifact a file of the local Maven repository is: its coordinates from its path there."""
    found = sorted(m2.rglob(file.name))
    if not found:
        raise FileNotFoundError(f"{file.name} is not in {m2}: run `make jars`")
    version_dir = found[0].parent
    name, version = version_dir.parent.name, version_dir.name
    group = ".".join(version_dir.parent.parent.relative_to(m2).parts)
    stem, _, ext = file.name.partition(f"{name}-{version}")[2].partition(".")
    return Artifact(group, name, version, hashlib.sha1(file.read_bytes()).hexdigest(), stem.lstrip("-"), ext)


def kafka_broker_lock() -> str:
    jars = sorted(KAFKA_JARS.glob("*.jar"))
    return HEADER.format(source="conf/maven/kafka-broker.pom.xml") + "".join(artifact_of(j).line() + "\n" for j in jars)


def spark_jars_lock() -> str:
    jars = sorted(SPARK_JARS.glob("*.jar"))
    return HEADER.format(source="conf/maven/spark-jars.pom.xml") + "".join(artifact_of(j).line() + "\n" for j in jars)


def schema_registry_lock() -> str:
    archives = sorted(M2.glob("io/apicurio/apicurio-registry-app/*/apicurio-registry-app-*-all.tar.gz"))
    if not archives:
        raise FileNotFoundError(f"no Apicurio archive in {M2}: run `make jars`")
    return HEADER.format(source="conf/maven/schema-registry.pom.xml") + artifact_of(archives[-1]).line() + "\n"


def main() -> None:
    (LOCKS / "kafka-broker.lock").write_text(kafka_broker_lock())
    (LOCKS / "schema-registry.lock").write_text(schema_registry_lock())
    (LOCKS / "spark-jars.lock").write_text(spark_jars_lock())


if __name__ == "__main__":
    main()
