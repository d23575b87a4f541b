"""The poison storm benchmark (`python -m bench poison-storm --smoke`) must keep working, and its judging
must say what it should.

No timing is asserted: a smoke run's rates mean nothing. To stay cheap (each run is a job's start)
the smoke runs the poison run alone (`--kinds poison`; `--smoke` alone adds the clean run and the
ratio): it must write its report, and its reader must find every record decided exactly once (every
good record in the table once, every bad one in the dead-letter table once as `malformed_json`,
nothing else). The judging (which values are bad, what counts as decided exactly once, the median
ratio against the target) is checked on made-up runs, with no broker and no Spark.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.poison_storm import BAD_VALUE, StormRun, TableCount, bad_count, problems_of, values, verdict
from devkit.sample_data import event_value

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.long  # a broker, a job and a checking Spark: about a minute, more than CI's budget has left
@pytest.mark.timeout(300)
def test_poison_storm_smoke_decides_every_record_exactly_once(tmp_path: Path) -> None:
    results = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "poison-storm", "--smoke", "--kinds", "poison", "--work-dir",
         str(tmp_path / "work"), "--results-dir", str(results)],
        cwd=ROOT, capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
    (report,) = results.glob("*-poison-storm-smoke.md")
    assert "Poison / clean, decided/s" in report.read_text()
    data = json.loads(report.with_suffix(".json").read_text())
    (poison,) = data["runs"]
    assert poison["kind"] == "poison" and poison["ok"] and not poison["problems"], (poison["error"], poison["problems"])
    assert poison["landed"]["rows"] == poison["landed"]["distinct_offsets"] == poison["good_expected"] > 0
    assert poison["dead"]["rows"] == poison["dead"]["distinct_offsets"] == poison["bad_expected"]
    assert poison["bad_expected"] == poison["produced"] // 10 > 0
    assert poison["dead"]["classes"] == {"malformed_json": poison["bad_expected"]}
    assert poison["kept_rate"] is not None and poison["kept_rate"] > 0
    assert poison["p50_ms"] is not None and poison["latency_samples"] > 0
    assert data["summary"]["verdict"]["exactly_once"]


def test_every_tenth_value_is_malformed() -> None:
    value_of = values(10)
    bad = [i for i in range(100) if value_of(i) == BAD_VALUE]
    assert bad == list(range(9, 100, 10))
    assert value_of(3) == event_value(3)
    assert all(values(0)(i) == event_value(i) for i in range(30))
    assert (bad_count(100, 10), bad_count(99, 10), bad_count(100, 0)) == (10, 9, 0)


def _run(kind: str, round_: int, kept: float, good: int = 90, bad: int = 10) -> StormRun:
    bad = bad if kind == "poison" else 0
    run = StormRun(round_, kind, f"t-{kind}-{round_}", 10 if kind == "poison" else 0, ok=True)
    run.good_expected, run.bad_expected, run.kept_rate = good, bad, kept
    run.landed = TableCount(good, good, good)
    run.dead = TableCount(bad, bad, bad, classes={"malformed_json": bad} if bad else {})
    return run


def test_problems_name_a_duplicate_a_loss_and_a_wrong_class() -> None:
    assert problems_of(_run("poison", 0, 1.0)) == []
    doubled = _run("poison", 0, 1.0)
    doubled.landed = TableCount(91, 90, 90)
    lost = _run("poison", 0, 1.0)
    lost.dead = TableCount(9, 9, 9, classes={"malformed_json": 9})
    other = _run("poison", 0, 1.0)
    other.dead.classes = {"malformed_json": 9, "schema_mismatch": 1}
    stray = _run("clean", 0, 1.0)
    stray.landed.foreign = 1
    for run in (doubled, lost, other, stray):
        assert problems_of(run), run


def test_verdict_takes_the_median_of_the_rounds_ratios() -> None:
    runs = []
    for round_, (clean, poison) in enumerate([(100.0, 90.0), (100.0, 70.0), (100.0, 85.0)]):
        c, p = _run("clean", round_, clean), _run("poison", round_, poison)
        p.ratio = poison / clean
        runs += [c, p]
    v = verdict(runs, 3)
    assert v.median == pytest.approx(0.85) and v.low == pytest.approx(0.7) and v.high == pytest.approx(0.9)
    assert v.met and v.exactly_once
    runs[3].ratio = 0.5  # round 1's poison run
    runs[5].ratio = 0.75
    assert not verdict(runs, 3).met
    runs[1].ok = False
    assert not verdict(runs, 3).exactly_once
