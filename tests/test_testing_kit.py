"""The testing kit as a user gets it: the installed wheel's pytest plugin, outside the checkout.

The example test of the manual (docs/examples/testing/) runs with the `sharelake[testing]` wheel in
a venv of its own (`make testing-env`), copied out of the checkout, with none of the checkout's jar
folders, an empty kit cache and an empty home: the broker's jars and Spark's (Delta, spark-avro,
the Kafka client) come from the kit's first-use fetch (Maven Central, SHA-1 checked) into its cache,
none from ~/.ivy2. The kit's lock files pin what the checkout's tests run. A conftest.py beside
the example notes what pytest's start-up imported: the plugin, and nothing heavy (no pyspark).
The project folder holds a top-level `app/` package of its own, as Flask, FastAPI and
Databricks projects do: the kit is imported as `sharelake` and never clashes with it (issue 48: the
wheel's package was named `app`, and such a project shadowed it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from devkit import artifact_locks
from devkit.paths import PROJECT_ROOT, TESTING_VENV
from sharelake.testing.maven_artifacts import locked, parse_lock

EXAMPLE = PROJECT_ROOT / "docs" / "examples" / "testing"
# the checkout's own settings a user's environment does not have
CHECKOUT_ENV = ("SHARELAKE_JARS", "SHARELAKE_KAFKA_JARS", "SHARELAKE_REGISTRY_DIR", "SHARELAKE_CLASS_ARCHIVES")
# a conftest.py beside the example, loaded after the plugins and before any test or fixture: it notes
# which of Sharelake's and the heavy packages pytest's start-up has imported
START_PROBE = """
import json, sys
from pathlib import Path

roots = ("sharelake", "pyspark", "delta", "py4j", "confluent_kafka", "pandas", "pyarrow")
loaded = sorted(m for m in sys.modules if m.split(".")[0] in roots)
Path(__file__).with_name("loaded-at-start.json").write_text(json.dumps(loaded))
"""
# a user's own top-level package `app` (a web app, a Databricks bundle), first on the project's sys.path
USERS_APP = {
    "app/__init__.py": '"""The user\'s web app."""\n\nNAME = "users-app"\n',
    "app/testing.py": '"""The user\'s own test helpers."""\n\nHELPERS = True\n',
}


def test_the_kits_locks_pin_the_jars_the_checkouts_tests_run() -> None:
    assert locked("kafka-broker.lock") == parse_lock(artifact_locks.kafka_broker_lock()), (
        "app/sharelake/testing/kafka-broker.lock differs from conf/maven/kafka-broker.pom.xml's jars: "
        "run `python -m devkit.artifact_locks`"
    )
    assert locked("schema-registry.lock") == parse_lock(artifact_locks.schema_registry_lock())
    assert locked("spark-jars.lock") == parse_lock(artifact_locks.spark_jars_lock()), (
        "app/sharelake/testing/spark-jars.lock differs from conf/maven/spark-jars.pom.xml's jars: "
        "run `python -m devkit.artifact_locks`"
    )


def test_the_manuals_example_passes_from_the_installed_wheel_in_a_project_with_its_own_app(tmp_path: Path) -> None:
    project = tmp_path / "users-project"
    shutil.copytree(EXAMPLE, project)
    (project / "conftest.py").write_text(START_PROBE)
    # the kit's cache empty, so the run proves the first-use fetch; a home of its own, empty, so
    # nothing comes from (or goes to) the user's ~/.ivy2, ~/.m2 or ~/.cache
    kit_cache, home = tmp_path / "kit-cache", tmp_path / "home"
    home.mkdir()
    for name, text in USERS_APP.items():
        (project / name).parent.mkdir(exist_ok=True)
        (project / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k not in CHECKOUT_ENV and k != "PYTHONPATH"}
    env |= {"SHARELAKE_TESTING_CACHE": str(kit_cache), "HOME": str(home)}
    python = str(TESTING_VENV / "bin" / "python")

    probe = "import app, sharelake.testing, sharelake.cli; print(app.__file__); print(sharelake.testing.__file__)"
    users_app, kit = subprocess.run([python, "-c", probe], cwd=project, env=env, text=True,
                                    capture_output=True, check=True).stdout.splitlines()  # fmt: skip
    assert users_app == str(project / "app" / "__init__.py"), f"the project's `app` came from {users_app}"
    assert kit.startswith(str(TESTING_VENV)), f"the kit came from {kit}, not the installed wheel"

    done = subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(project)],
        cwd=project, env=env, text=True, capture_output=True, timeout=600,
    )  # fmt: skip
    print(done.stdout[-3000:], done.stderr[-2000:])
    assert done.returncode == 0, f"the example failed:\n{done.stdout[-6000:]}\n{done.stderr[-3000:]}"
    assert "1 passed" in done.stdout
    # the plugin was loaded at start-up, and loaded nothing heavy: pyspark and the rest wait for a fixture
    at_start = json.loads((project / "loaded-at-start.json").read_text())
    assert "sharelake.testing.plugin" in at_start, at_start
    heavy = [m for m in at_start if m not in ("sharelake", "sharelake.testing", "sharelake.testing.plugin")]
    assert not heavy, f"pytest's start-up imported {heavy[:12]} before any test asked for a fixture"
    assert list(kit_cache.glob("kafka-broker-*/kafka_2.13-*.jar")), "the broker ran without the kit's fetched jars"
    assert list(kit_cache.glob("spark-jars-*/delta-spark_*.jar")), (
        f"Spark ran without Delta's jars in the kit's cache: {sorted(p.name for p in kit_cache.iterdir())}"
    )
    assert not list(home.iterdir()), f"the run wrote to the home folder: {sorted(p.name for p in home.iterdir())}"


def test_the_manual_shows_the_example_as_it_runs() -> None:
    manual = (PROJECT_ROOT / "docs" / "testing.md").read_text()
    shown = manual.split("```python\n", 1)[1].split("```", 1)[0]
    example = (EXAMPLE / "test_orders_pipeline.py").read_text()
    assert shown.strip() in example, (
        "docs/testing.md's example differs from docs/examples/testing/test_orders_pipeline.py"
    )
