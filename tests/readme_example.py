"""The README's "On your own broker" example: its config block and its command, as printed.

Used by tests/test_ingest_job_submit.py, which runs it (submitted as printed, and as the installed
`sharelake` command), and tests/test_docs.py, which checks the extraction itself.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path

from tests.job_runner import ROOT

# what the README's example names, and what a test puts in their place (nothing else changes)
PLACEHOLDERS = {
    '"localhost:9092"': "bootstrap",
    '"events"': "topic",
    '"sharelake-events"': "group",
    '"/tmp/sharelake/events"': "table",
}
COMMAND = ["./spark-submit.sh", "jobs/main.py"]  # the README's command: the checkout's paths


def own_broker_example(text: str) -> tuple[str, str]:
    """The config block and the command block under the README's "On your own broker"."""
    section = text.split("\n## On your own broker\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```(\w+)\n(.*?)^```", section, flags=re.S | re.M)
    assert [lang for lang, _ in blocks] == ["toml", "bash"], "the section holds one toml block, then one bash block"
    return blocks[0][1], blocks[1][1]


@dataclass(frozen=True)
class ReadmeExample:
    config: str  # the README's config with the test's broker, topic, group and table, nothing else changed
    args: list[str]  # the command's arguments after the checkout's script and job: `ingest --config FILE`


def readme_example(bootstrap: str, topic: str, group: str, table: Path) -> ReadmeExample:
    """The README's example for a test's broker, topic, group and table (asserting nothing else changes)."""
    config, command = own_broker_example((ROOT / "README.md").read_text())
    names = {"bootstrap": bootstrap, "topic": topic, "group": group, "table": str(table)}
    ours = config
    for placeholder, name in PLACEHOLDERS.items():
        assert config.count(placeholder) == 1, f"the README's example no longer names {placeholder} once"
        ours = ours.replace(placeholder, f'"{names[name]}"')
    printed, run = tomllib.loads(config), tomllib.loads(ours)
    assert run == {
        **printed,
        "kafka": {**printed["kafka"], "bootstrap_servers": bootstrap, "topic": topic, "group_id": group},
        "delta": {**printed["delta"], "table_path": str(table)},
    }
    argv = shlex.split(command, comments=True)
    assert argv[:2] == COMMAND and argv[2:4] == ["ingest", "--config"] and len(argv) == 5, command
    return ReadmeExample(ours, argv[2:])
