"""Several drivers on one table, each a host of its own (`python -m bench scale-out --smoke`).

The scale-out harness at smoke size, under `make chaos` (the network's namespaces need root): two
drivers on two hosts in one share group, at a steady offered rate, land every record once, and
the report gives each driver's commits and refusals. No figure is asserted: a smoke run's numbers
mean nothing (the full run's report is in bench/results/, its model in docs/tuning.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from devkit import network

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.long
@pytest.mark.timeout(600)
def test_two_drivers_on_two_hosts_land_every_record_once(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    done = subprocess.run(
        [sys.executable, "-m", "bench", "scale-out", "--smoke", "--drivers", "1,2", "--results-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=540,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
    (report,) = tmp_path.glob("*-scale-out-smoke.json")
    runs = json.loads(report.read_text())["runs"]
    assert [(r["drivers"], r["ok"], r["rows"], r["duplicates"]) for r in runs] == [
        (1, True, 5000, 0),
        (2, True, 5000, 0),
    ]
    two = runs[1]["per_driver"]
    assert len(two) == 2 and all(d["commits"] > 0 for d in two), two  # both drivers wrote
    assert not network.ours(), "the harness left network namespaces behind"
