"""The soak, bounded: 75 s at 60% of the measured maximum, a broker restart and a driver kill -9.

`devkit.soak` runs the scenario; `python -m bench soak` runs it for 30 minutes and reports it; `make chaos`
runs this bounded form (`SHARELAKE_SOAK_SECONDS`, default 75; a start's memory measured from 20 s after it,
where the long soak waits 60 s). The test's own broker is killed and restarted, so the session's shared broker
is left alone.

Nothing here assumes a machine's speed: the load is 60% of the drain the calibration measured on
the machine at hand, and the second fault strikes only once the job has landed rows again after
the first (a broker's restart alone took 20 s on a loaded machine). The test asserts the guarantee
(every delivered record once, nothing lost, a sentinel proving the group has nothing left) and
fails saying so when the scenario did not happen (a fault that hit an idle job, a load not offered).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from devkit.soak import memory_by_incarnation, run_soak
from sharelake.testing.kafka_broker import EmbeddedKafka
from tests.kafka_helpers import nothing_left

SECONDS = float(os.environ.get("SHARELAKE_SOAK_SECONDS", "75"))
CALIBRATE = 60_000  # the backlog whose drain sets the load


@pytest.mark.chaos
@pytest.mark.long  # CI time: the kill loop, the broker deaths and the crash points cover its faults
def test_soak_under_kills_lands_everything_once(spark: SparkSession, tmp_path: Path) -> None:
    with EmbeddedKafka(tmp_path / "broker") as broker:
        # the broker restart first, then the driver kill: a cold start under the soak's load took
        # 36-39 s before its first batch in a CI run; the last fault's window runs to the end of the drain
        run = run_soak(
            broker, tmp_path / "soak", duration_s=SECONDS, fault_every_s=SECONDS / 3,
            calibrate_records=CALIBRATE, pattern="BD", spark=spark, warm_s=20,
        )  # fmt: skip
        print(*run.faults, *memory_by_incarnation(run), sep="\n")  # the report is `python -m bench soak`'s
        assert not run.error, run.error  # a fault the job never recovered from, or a drain that did not end

        kinds = [f.kind for f in run.faults]
        assert kinds == ["broker kill -9 + restart", "driver kill -9"], kinds
        idle = [f"{f.kind} at {f.at_s:.0f} s" for f in run.faults if f.lag_at <= 0]
        if idle:
            pytest.fail(f"scenario not provoked: {', '.join(idle)} struck with no record in flight")
        steady = run.delivered - CALIBRATE
        if steady < 0.5 * run.rate * SECONDS:
            pytest.fail(
                f"scenario not provoked: the producer offered {steady:,} records in {SECONDS:.0f} s, under half the "
                f"{run.rate:,} records/s the calibration ({run.max_rate:,.0f} records/s) set"
            )
        assert run.incarnations == 2  # the kill's restart, and no death of its own
        assert run.lost == 0 and run.duplicates == 0, run
        assert run.rows == run.delivered and run.dead_lettered == 0
        assert (run.replans, run.commit_conflicts) == (0, 0)  # one job at a time: no race to meet
        # the job went on landing rows after each fault: the next fault waited for it, the last
        # one's rows count through the drain (how fast the lag came back is `python -m bench soak`'s figure)
        assert all(f.landed > 0 for f in run.faults), run.faults
        assert memory_by_incarnation(run), "no job start ran long enough to measure its memory"
        assert nothing_left(broker, "soak", "g-soak")
