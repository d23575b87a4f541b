"""Bad rows are named with their class whichever way the write found them (real Delta tables).

The table writer counts the rows Spark cannot read in the write's job and names them in a second
job, except after a write that had bad rows: the next write then collects their verdicts in its own
job. Batches alternate here between bad and clean so that both ways (and the switch back) run; each
must land the good rows once, park each bad one once with its class, and decide every record (the
last batch's dead-letter append is over once the sink finishes).
"""

from __future__ import annotations

import queue
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession

from devkit.sample_data import EVENT_SCHEMA, event_value
from sharelake.acknowledge.lifecycle import AckCommand, PollBatch
from sharelake.acknowledge.proof import RecordState
from sharelake.acknowledge.window import DecisionWindow
from sharelake.bridge.arrow_rows import poll_rows
from sharelake.bridge.record_buffer import Poll, RecordBuffer
from sharelake.bridge.synthetic_record import SyntheticRecord
from sharelake.config.settings import BatchConfig
from sharelake.formats.json import JsonFormat, JsonSettings
from sharelake.sink.batch.delta_sink import DeltaSink
from sharelake.sink.dead_letter.sinks import DeltaDeadLetters, dead_letter_table
from sharelake.sink.dedup.dedup_table import DedupTable
from sharelake.sink.write.destinations import Destination, main_table
from sharelake.table.location import TableLocation
from tests.table_checks import dead_letters_by_key
from tests.test_lifecycle import state_of

TOPIC = "named"
BAD_VALUES = {  # a bad value and the class it must be parked with
    "malformed_json": b'{"id": 1, "user": ',
    "schema_mismatch": b'{"id": "seven", "user": "u"}',
    "invalid_utf8": b"\xff\xfe",
}


def json_sink(
    spark: SparkSession, where: TableLocation, batch: BatchConfig, counts_deliveries: bool
) -> tuple[DeltaSink, RecordBuffer, DedupTable, DedupTable]:
    """A sink of the workload's JSON events into `where`, with its dead-letter table beside it."""
    fmt = JsonFormat(JsonSettings(format="json", schema=EVENT_SCHEMA))
    fmt.start(spark, where)
    main = main_table(spark, where, fmt, checkpoint_every=100, lookback_commits=None)
    dead = dead_letter_table(spark, where.dead_letter(), checkpoint_every=100, lookback_commits=None)
    buffer = RecordBuffer(10_000)
    dead_letters = DeltaDeadLetters(dead.table, dead.frames)
    destinations = [Destination.of((TOPIC,), main, fmt)]
    sink = DeltaSink(
        buffer,
        destinations,
        dead_letters,
        batch,
        5,
        DecisionWindow.record_lock(30.0),
        "t",
        counts_deliveries=counts_deliveries,
    )
    return sink, buffer, main.table, dead.table


@pytest.mark.parametrize("counts_deliveries", [True, False], ids=["share-group", "no-delivery-counts"])
def test_bad_rows_keep_their_class_in_batches_with_and_without_bad_rows(
    spark: SparkSession, tmp_path: Path, counts_deliveries: bool
) -> None:
    """With delivery counts (a share group's first deliveries) each batch's dead-letter append runs
    beside the next batch; without, the next plan waits for it and reads the dead-letter table."""
    where = TableLocation.at(tmp_path / "events")
    dead_where = where.dead_letter()
    sink, buffer, table, dead = json_sink(spark, where, BatchConfig(max_wait_ms=0), counts_deliveries)
    good_ids: list[int] = []
    expected_bad: dict[str, str] = {}
    polls: list[PollBatch] = []
    try:
        for batch_id, with_bad in enumerate([True, True, False, True, False]):  # count, collect, collect, count
            records = []
            for n in range(batch_id * 100, batch_id * 100 + 50):
                records.append(SyntheticRecord(TOPIC, 0, n, key=b"g%d" % n, value=event_value(n), timestamp_ms=1))
                good_ids.append(n)
            if with_bad:
                for i, (error_class, value) in enumerate(BAD_VALUES.items()):
                    key = f"b{batch_id}-{i}"
                    records.append(SyntheticRecord(TOPIC, 0, batch_id * 100 + 50 + i, key=key.encode(), value=value))
                    expected_bad[key] = error_class
            commands: queue.Queue[AckCommand] = queue.Queue()
            polled: Any = records
            poll = PollBatch(0, polled, commands)
            polls.append(poll)
            assert buffer.put(Poll(poll, poll_rows(polled)), 1)
            sink(spark.range(1), batch_id)
    finally:
        sink.finish()
        table.close()
        dead.close()

    landed = spark.read.format("delta").load(where.path).select("id").orderBy("id")
    assert_df_equality(landed, spark.createDataFrame([(i,) for i in good_ids], "id long"))
    parked = dead_letters_by_key(spark, dead_where.path)
    assert {k: r["error_class"] for k, r in parked.items()} == expected_bad
    for poll in polls:
        states = {state_of(poll, i) for i in range(len(poll))}
        assert states <= {RecordState.ACCEPTED, RecordState.REJECTED}
    rejected = sum(state_of(p, i) is RecordState.REJECTED for p in polls for i in range(len(p)))
    assert rejected == len(expected_bad)


@pytest.mark.usefixtures("clean_faults")
def test_a_failed_dead_letter_append_releases_its_records_and_fails_the_next_attempt(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dead-letter append runs beside the next batch: when it fails, its records are RELEASEd
    (never REJECTed without a commit), the next attempt that must read the dead-letter table fails
    with its error (and RELEASEs its own records), and the records, come back, are parked once."""
    where = TableLocation.at(tmp_path / "events")
    dead_where = where.dead_letter()
    sink, buffer, table, dead = json_sink(spark, where, BatchConfig(max_wait_ms=0, write_attempts=1), True)

    def poll(records: list[SyntheticRecord]) -> PollBatch:
        polled: Any = records
        batch = PollBatch(0, polled, queue.Queue())
        assert buffer.put(Poll(batch, poll_rows(polled)), 1)
        return batch

    def bad(delivery: int) -> list[SyntheticRecord]:
        return [
            SyntheticRecord(TOPIC, 0, 50 + i, key=f"bad-{i}".encode(), value=v, delivery_count=delivery)
            for i, v in enumerate(BAD_VALUES.values())
        ]

    monkeypatch.setenv("SHARELAKE_FAULTS", "error@before_dead_letter_commit#1")
    try:
        good = [SyntheticRecord(TOPIC, 0, n, key=b"g%d" % n, value=event_value(n), timestamp_ms=1) for n in range(50)]
        first = poll(good + bad(1))
        sink(spark.range(1), 0)  # lands the good ones; the append of the bad ones fails beside it
        again = poll(bad(2))  # come back: this plan reads the dead-letter table, after that append
        with pytest.raises(Exception, match="before_dead_letter_commit"):
            sink(spark.range(1), 1)
        last = poll(bad(3))
        sink(spark.range(1), 2)
    finally:
        sink.finish()
        table.close()
        dead.close()

    assert [state_of(first, i) for i in range(len(first))] == [RecordState.ACCEPTED] * 50 + [RecordState.RELEASED] * 3
    assert {state_of(again, i) for i in range(3)} == {RecordState.RELEASED}
    assert {state_of(last, i) for i in range(3)} == {RecordState.REJECTED}
    parked = dead_letters_by_key(spark, dead_where.path)
    assert {k: r["error_class"] for k, r in parked.items()} == {f"bad-{i}": c for i, c in enumerate(BAD_VALUES)}
    assert spark.read.format("delta").load(where.path).count() == 50
