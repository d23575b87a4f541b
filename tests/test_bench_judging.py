"""How the sustained-rate bench (`python -m bench sustained`) judges a step and a contender: no broker, no Spark.

A bench that passed a job falling behind, or called a bound an exact rate, would report a target
met that was not; these pin the rules the report states.
"""

from __future__ import annotations

import math

from bench.contenders.base import RunResult
from bench.latency import LatencyRun
from bench.sustained import Step, StepFigures, SustainedSettings, judge, ratio, verdict
from bench.verify import Window

SHARELAKE, SPARK = "sharelake", "spark-kafka-source"


def figures(p99s: list[float]) -> StepFigures:
    windows = [Window(10.0 * i, 10.0 * (i + 1), 100, p / 2, p, p) for i, p in enumerate(p99s)]
    return StepFigures(100 * len(p99s), 0, 0, min(p99s) / 2, max(p99s), max(p99s), windows)


def step(contender: str, rate: int, p99s: list[float], landed: int = 1000, lag_s: float = 0.0) -> Step:
    result = RunResult(contender, "latency", 4, 4, ok=True, records=landed, seconds=60.0)
    st = Step(contender, rate, LatencyRun(result, "t", 100, 1000, lag_s), figures(p99s))
    st.reasons, st.over_limit = judge(st, SustainedSettings())
    return st


def test_a_flat_p99_within_the_limit_passes_and_a_growing_one_falls_behind() -> None:
    assert step(SHARELAKE, 5000, [900, 1000, 950, 1000]).passed
    growing = step(SHARELAKE, 10000, [500, 600, 900, 1400])
    assert not growing.passed and "falls behind" in growing.reasons[0]


def test_a_p99_over_the_limit_a_missing_record_or_a_late_producer_fails_the_step() -> None:
    over = step(SHARELAKE, 5000, [2500, 2500])
    assert over.failures == ["p99 2.50 s > 2 s"] and over.keeps_up  # over the limit, yet kept up
    assert "only 999 of 1,000" in step(SHARELAKE, 5000, [900, 900], landed=999).reasons[0]
    assert "producer behind" in step(SHARELAKE, 5000, [900, 900], lag_s=3.0).reasons[0]


def test_the_sustained_rate_is_the_last_step_passed_and_a_bound_when_nothing_failed() -> None:
    steps = [step(SHARELAKE, 5000, [900]), step(SHARELAKE, 10000, [1000]), step(SHARELAKE, 15000, [3000])]
    steps += [step(SPARK, 5000, [1500])]
    mine, theirs = verdict(steps, SHARELAKE), verdict(steps, SPARK)
    assert (mine.rate, mine.exact) == (10000, True)
    assert (theirs.rate, theirs.exact) == (5000, False)  # every step passed: its limit is higher

    value, sign, target = ratio(mine, theirs)
    assert (value, sign, target) == (2.0, "<=", "not determined (bounds only)")

    spark_failed = [*steps, step(SPARK, 10000, [2600])]
    assert ratio(mine, verdict(spark_failed, SPARK)) == (2.0, "=", "met")


def test_the_rate_kept_up_with_looks_past_the_p99_limit_to_the_first_step_not_kept_up_with() -> None:
    steps = [step(SPARK, 2500, [3000]), step(SPARK, 5000, [3500]), step(SPARK, 10000, [3000, 3200, 9000])]
    assert verdict(steps, SPARK).rate == 0  # over the p99 limit from the first step
    kept = verdict(steps, SPARK, kept_up=True)
    assert (kept.rate, kept.exact) == (5000, True) and "falls behind" in kept.note


def test_no_rate_sustained_gives_no_ratio() -> None:
    steps = [step(SHARELAKE, 5000, [900]), step(SPARK, 2500, [9000])]
    value, _, target = ratio(verdict(steps, SHARELAKE), verdict(steps, SPARK))
    assert math.isnan(value) and target.startswith("not determined")
