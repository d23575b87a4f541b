"""Contender (a2), Sharelake with `kafka.group_type = "consumer"`: the same job on a classic consumer group.

Beside contender (a), the share-group job: the same command, topic, table layout and until-drained
run, with a fresh consumer group per run (offsets committed to Kafka after each Delta commit, at
most one member per partition). Its records/s is measured as (a)'s is.
"""

from __future__ import annotations

from bench.contenders.base import RunContext, RunResult
from bench.contenders.sharelake import run_sharelake

NAME = "sharelake-consumer-group"


def run_sharelake_consumer_group(ctx: RunContext) -> RunResult:
    return run_sharelake(ctx, NAME, extra_sets=("kafka.group_type=consumer",))
