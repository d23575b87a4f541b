"""The `sharelake` command as users run it: the console script of the installed package.

`check` runs the ingest job's start-up checks alone and changes nothing on the broker: the group
keeps its settings (the job would set `share.auto.offset.reset`) and a missing broker dead-letter
topic is not created. A bad config ends it with exit code 2 and one line naming the key. `version`
names the installed package. (`status` is tested with the group's state, in test_group_status.py.)
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from devkit.paths import VENV_BIN
from sharelake.consume.share.group_settings import read_group_settings
from sharelake.testing.kafka_broker import EmbeddedKafka
from tests.job_runner import ROOT

SHARELAKE = str(VENV_BIN / "sharelake")


def sharelake(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SHARELAKE, *args], capture_output=True, text=True, timeout=240, cwd=cwd)


def test_version_names_the_installed_package(tmp_path: Path) -> None:
    done = sharelake("version", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("sharelake 0.") and "pyspark 4.2.0" in done.stdout and "delta-spark" in done.stdout


def test_check_reaches_everything_and_changes_nothing(broker: EmbeddedKafka, tmp_path: Path, unique: str) -> None:
    topic, group = f"check-{unique}", f"g-check-{unique}"
    broker.create_topic(topic, partitions=3)
    config = shutil.copy(ROOT / "conf" / "local.toml", tmp_path / "job.toml")
    common = ["--config", str(config), "--set", f"kafka.bootstrap_servers={broker.bootstrap}",
              "--set", f"kafka.group_id={group}", "--set", f"delta.table_path={tmp_path / 'table'}"]  # fmt: skip
    dead_letter_topic = f"dlq.check-{unique}"
    passed = sharelake("check", *common, "--set", f"kafka.topic={topic}",
                       "--set", f"kafka.broker_dead_letter_topic={dead_letter_topic}", cwd=tmp_path)  # fmt: skip
    assert passed.returncode == 0, passed.stdout[-3000:] + passed.stderr[-3000:]
    assert f"sharelake: check passed: {broker.bootstrap} ({topic}: 3 partitions), share group {group}" in passed.stdout
    # read-only: the group kept its settings and the broker dead-letter topic was not created
    settings = read_group_settings(broker.admin(), group)
    assert settings.get("share.auto.offset.reset") == "latest", settings  # the job would set earliest
    assert dead_letter_topic not in broker.admin().list_topics(timeout=10).topics

    refused = sharelake("check", *common, "--set", f"kafka.topic=missing-{unique}", cwd=tmp_path)
    assert refused.returncode == 2, refused.stdout[-3000:] + refused.stderr[-3000:]
    last = refused.stderr.strip().splitlines()[-1]
    assert last == (
        f"sharelake: kafka.topic = 'missing-{unique}': no such topic on {broker.bootstrap}; create it or fix the name"
    ), refused.stderr[-3000:]

    bad_key = sharelake("check", *common, "--set", "pump.members=0", "--set", f"kafka.topic={topic}", cwd=tmp_path)
    assert bad_key.returncode == 2
    assert bad_key.stderr.strip().splitlines()[-1].startswith("sharelake: config key pump.members = 0")
