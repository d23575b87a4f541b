"""The testing kit as a user gets it: the installed wheel's pytest plugin, outside the checkout.

The example test of the manual (docs/examples/testing/) runs with the `sharelake[testing]` wheel in
a venv of its own (`make testing-env`), copied out of the checkout, with none of the checkout's jar
folders: the broker's jars come from the kit's first-use fetch (Maven Central, SHA-1 checked),
Delta's from Spark's. The kit's lock files pin what the checkout's tests run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from app.testing.maven_artifacts import locked, parse_lock
from devkit import artifact_locks
from devkit.paths import CACHE_DIR, PROJECT_ROOT, TESTING_VENV

EXAMPLE = PROJECT_ROOT / "docs" / "examples" / "testing"
# where the kit keeps what it fetched: empty on a clean clone, so CI proves the first-use fetch
KIT_CACHE = CACHE_DIR / "testing-kit"
# the checkout's own settings a user's environment does not have
CHECKOUT_ENV = ("SHARELAKE_JARS", "SHARELAKE_KAFKA_JARS", "SHARELAKE_REGISTRY_DIR", "SHARELAKE_CLASS_ARCHIVES")


def test_the_kits_locks_pin_the_jars_the_checkouts_tests_run() -> None:
    assert locked("kafka-broker.lock") == parse_lock(artifact_locks.kafka_broker_lock()), (
        "app/testing/kafka-broker.lock differs from conf/maven/kafka-broker.pom.xml's jars: "
        "run `python -m devkit.artifact_locks`"
    )
    assert locked("schema-registry.lock") == parse_lock(artifact_locks.schema_registry_lock())


def test_the_manuals_example_passes_from_the_installed_wheel(tmp_path: Path) -> None:
    project = tmp_path / "users-project"
    shutil.copytree(EXAMPLE, project)
    env = {k: v for k, v in os.environ.items() if k not in CHECKOUT_ENV and k != "PYTHONPATH"}
    env["SHARELAKE_TESTING_CACHE"] = str(KIT_CACHE)
    python = str(TESTING_VENV / "bin" / "python")

    where = subprocess.run([python, "-c", "import app; print(app.__file__)"], cwd=project, env=env, text=True,
                           capture_output=True, check=True).stdout  # fmt: skip
    assert where.startswith(str(TESTING_VENV)), f"the kit came from {where}, not the installed wheel"

    done = subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(project)],
        cwd=project, env=env, text=True, capture_output=True, timeout=600,
    )  # fmt: skip
    print(done.stdout[-3000:], done.stderr[-2000:])
    assert done.returncode == 0, f"the example failed:\n{done.stdout[-6000:]}\n{done.stderr[-3000:]}"
    assert "1 passed" in done.stdout
    assert list(KIT_CACHE.glob("kafka-broker-*/kafka_2.13-*.jar")), "the broker ran without the kit's fetched jars"


def test_the_manual_shows_the_example_as_it_runs() -> None:
    manual = (PROJECT_ROOT / "docs" / "testing.md").read_text()
    shown = manual.split("```python\n", 1)[1].split("```", 1)[0]
    example = (EXAMPLE / "test_orders_pipeline.py").read_text()
    assert shown.strip() in example, (
        "docs/testing.md's example differs from docs/examples/testing/test_orders_pipeline.py"
    )
