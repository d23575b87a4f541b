"""What a few bad records cost a batch: `python -m bench bad-batches [records] [bad] [rounds]`.

Not a phase of `bench.run` (it needs no broker). It runs the Delta sink's whole batch (the plan,
the JSON parse and append, the bad rows named, the dead-letter append, the decisions) on a local
SparkSession and real Delta tables, the way the warm-up does: synthetic records of the sample
events (`devkit.sample_data.event_value`) go through a RecordBuffer to a `DeltaSink`, and the
decisions go to a queue nobody reads; the records are first deliveries of a share group, so a
batch's dead-letter append runs beside the next batch, as in a job. It runs `rounds` clean batches
of `records` JSON events, then as many of the same size of which `bad` are malformed JSON (a
stream that carries poison keeps carrying it), each on new offsets; the first batch of each kind
is left out of the medians (code generation, the Python workers, the switch). Prints each kind's
median batch time, their ratio, the first bad batch's time (the switch: its bad rows are named in
a job of their own) and the sink's step times of the last bad batch.
"""

from __future__ import annotations

import argparse
import queue
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from devkit.sample_data import EVENT_SCHEMA, event_value
from sharelake.acknowledge.lifecycle import AckCommand, PollBatch
from sharelake.acknowledge.window import DecisionWindow
from sharelake.bridge.arrow_rows import poll_rows
from sharelake.bridge.record_buffer import Poll, RecordBuffer
from sharelake.bridge.synthetic_record import SyntheticRecord
from sharelake.config.settings import BatchConfig
from sharelake.formats.json import JsonFormat, JsonSettings
from sharelake.run.spark_session import build_spark
from sharelake.sink.batch.delta_sink import DeltaSink
from sharelake.sink.dead_letter.sinks import DeltaDeadLetters, dead_letter_table
from sharelake.sink.write.destinations import Destination, main_table
from sharelake.table.location import TableLocation

HELP = "what a few bad records cost the sink's batch, on a local SparkSession and real Delta tables (no broker)"
TOPIC = "bench-bad-batches"
PARTITIONS = 4


def batch(first_offset: int, records: int, bad: int) -> list[SyntheticRecord]:
    """`records` events on PARTITIONS partitions from `first_offset`; every (records // bad)th malformed."""
    step = records // bad if bad else 0
    now = int(time.time() * 1000)
    return [
        SyntheticRecord(
            TOPIC,
            n % PARTITIONS,
            first_offset + n // PARTITIONS,
            key=None,
            value=b'{"id": 1, "user": ' if step and n % step == step - 1 else event_value(n),
            headers=None,
            timestamp_ms=now,
        )
        for n in range(records)
    ]


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("records", type=int, nargs="?", default=10_000, help="JSON records a batch (default 10,000)")
    p.add_argument("bad", type=int, nargs="?", default=5, help="malformed ones in a bad batch (default 5)")
    p.add_argument("rounds", type=int, nargs="?", default=6, help="batches of each kind, after the first (default 6)")


def settings(args: argparse.Namespace) -> tuple[int, int, int]:
    """(records a batch, bad ones in a bad batch, rounds)."""
    return args.records, args.bad, args.rounds


def run(args: argparse.Namespace) -> int:
    records, bad, rounds = settings(args)
    spark = build_spark("sharelake-bench-bad-batches", "local[2]")
    work = Path(tempfile.mkdtemp(prefix="sharelake-bad-batches-"))
    fmt = JsonFormat(JsonSettings(format="json", schema=EVENT_SCHEMA))
    where = TableLocation.at(work / "events")
    fmt.start(spark, where)
    main = main_table(spark, where, fmt, checkpoint_every=10, lookback_commits=None)
    dead = dead_letter_table(spark, TableLocation.at(work / "dead_letter"), checkpoint_every=10, lookback_commits=None)
    buffer = RecordBuffer(10**7)
    config = BatchConfig(max_records=10**7, max_wait_ms=0, write_attempts=1)
    sink = DeltaSink(
        buffer,
        [Destination.of((TOPIC,), main, fmt)],
        DeltaDeadLetters(dead.table, dead.frames),
        config,
        10,
        DecisionWindow.record_lock(3600.0),
        "bench",
        counts_deliveries=True,  # first deliveries of a share group, as a job reads them
    )
    commands: queue.Queue[AckCommand] = queue.Queue()
    seconds: dict[str, list[float]] = {"clean": [], "bad": []}
    switch = float("nan")
    offset, batch_id = 0, 0
    try:
        for kind, count in (("clean", 0), ("bad", bad)):
            for n in range(rounds + 1):
                polled = batch(offset, records, count)
                offset += records // PARTITIONS + 1
                buffer.put(Poll(PollBatch(n, polled, commands), poll_rows(polled)), timeout_s=1)  # type: ignore[arg-type]
                started = time.perf_counter()
                sink(spark.range(0), batch_id)
                batch_id += 1
                if n:  # the first round warms the path up
                    seconds[kind].append(time.perf_counter() - started)
                elif kind == "bad":  # the first batch with bad records after clean ones
                    switch = time.perf_counter() - started
        clean, dirty = statistics.median(seconds["clean"]), statistics.median(seconds["bad"])
        print(f"{records:,} JSON records a batch, {rounds} rounds (medians)")
        print(f"  clean batch: {clean * 1000:.0f} ms")
        print(f"  batch with {bad} malformed: {dirty * 1000:.0f} ms")
        print(f"  ratio: {dirty / clean:.2f}")
        print(f"  the first batch with {bad} malformed after clean ones: {switch * 1000:.0f} ms")
        steps = " ".join(f"{k}={v * 1000:.0f}" for k, v in sink.stats.cycle.items())
        print(f"  steps of the last bad batch, ms: {steps}")
    finally:
        sink.finish()
        main.table.close()
        dead.table.close()
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0
