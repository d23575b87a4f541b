"""Warms the write path at start, before the members poll (they have joined the share group by then).

It runs after the start-up checks and before any member polls (and in the training run of the
driver's class archive), with a `DeltaSink` of its own (and a `DeltaDeadLetters` on a temporary
dead-letter table: the Delta path is what needs warming). The first Delta append of
a fresh JVM is several times slower than the next (class loading, JIT, whole-stage codegen of the
payload parse, Delta's commit path); records polled before it would wait that long with their
locks held. So a throwaway sink runs the real path once on synthetic records, on temporary tables
that are deleted afterwards: Arrow rows with headers, the plan, the frame, the one-job parse and
append; with `bad`, through one unreadable record, the diagnosis and the dead-letter append. Spark keeps
the generated code (its cache is keyed by the code, which the same schema and expressions
reproduce) and the JVM stays warm. Fault points are suspended meanwhile, and a failure here only
logs a warning: the real path then warms itself on the first batch, as before.
"""

from __future__ import annotations

import logging
import queue
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from sharelake.acknowledge.lifecycle import AckCommand, PollBatch
from sharelake.acknowledge.window import DecisionWindow
from sharelake.bridge.arrow_rows import poll_rows
from sharelake.bridge.record_buffer import Poll, RecordBuffer
from sharelake.bridge.synthetic_record import SyntheticRecord
from sharelake.config.settings import BatchConfig
from sharelake.failures import faults
from sharelake.formats.base import PayloadFormat
from sharelake.sink.batch.delta_sink import DeltaSink
from sharelake.sink.batch.table_writer import TableWriter
from sharelake.sink.dead_letter.sinks import DeltaDeadLetters, dead_letter_table
from sharelake.sink.dedup.dedup_table import DedupTable
from sharelake.sink.delta.frames import ROWS_PER_TASK
from sharelake.sink.write.destinations import Destination, main_table
from sharelake.table.location import TableLocation

log = logging.getLogger(__name__)

WARM_UP_WINDOW = DecisionWindow.record_lock(3600.0)  # nothing waits on the synthetic records
TOPIC = "sharelake-warm-up"  # the synthetic records' topic (one per format: `-0`, `-1`, ...)


def _record(topic: str, n: int, value: bytes | None, key: bytes | None) -> SyntheticRecord:
    """The `n`th synthetic record of a topic: two partitions, headers on every third, created now."""
    headers = [("warm", b"up")] if n % 3 == 0 else None
    return SyntheticRecord(topic, n % 2, n, key=key, value=value, headers=headers, timestamp_ms=int(time.time() * 1000))


def warm_up(
    spark: SparkSession, formats: list[PayloadFormat], max_delivery_count: int, job_name: str, bad: bool = False
) -> float:
    """Run the write path once on temporary tables, one per format; the seconds it took (0 if it failed).

    `bad`: with each format's unreadable sample too, so that the bad records' path (the diagnosis,
    the dead-letter append) runs as well. A job's start leaves it out: every start would pay it
    (about a second), while only a first batch with bad records pays it otherwise, once, and the
    driver's class archive (`sharelake.run.class_archive`, whose training run warms it) already holds
    its classes."""
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="sharelake-warm-up-"))
    tables: list[DedupTable] = []
    quiet = [logging.getLogger(name) for name in (DeltaSink.__module__, TableWriter.__module__, "sharelake.formats")]
    levels = [logger.level for logger in quiet]
    for logger in quiet:  # its dead-lettered sample records and its synthetic schema are not news
        logger.setLevel(logging.ERROR)
    try:
        with faults.suspended():
            destinations, records = [], []
            for i, fmt in enumerate(formats):
                twin = fmt.warm_up_twin()  # the format's reader, on a schema of its own where it keeps state
                where = TableLocation.at(work / f"warm_up_{i}")  # writer `warm_up`: not the real tables' fault points
                main = main_table(spark, where, twin, checkpoint_every=10**6, lookback_commits=None, name="warm_up")
                tables.append(main.table)
                destinations.append(Destination.of((f"{TOPIC}-{i}",), main, twin))
                values, keys = twin.sample_values(2 * ROWS_PER_TASK), twin.sample_keys(2 * ROWS_PER_TASK)
                if not bad:  # the last sample value is the unreadable one
                    values, keys = values[:-1], keys[:-1]
                records += [_record(f"{TOPIC}-{i}", n, v, k) for n, (v, k) in enumerate(zip(values, keys, strict=True))]
            dead = dead_letter_table(
                spark,
                TableLocation.at(work / "warm_up_dead_letter"),
                checkpoint_every=10**6,
                lookback_commits=None,
                name="warm_up_dead_letter",
            )
            tables.append(dead.table)
            buffer = RecordBuffer(10**6)
            batch = BatchConfig(max_records=10**6, max_wait_ms=0, write_attempts=1)
            dead_letters = DeltaDeadLetters(dead.table, dead.frames)
            sink = DeltaSink(buffer, destinations, dead_letters, batch, max_delivery_count, WARM_UP_WINDOW, job_name)
            commands: queue.Queue[AckCommand] = queue.Queue()
            polled: Any = records
            buffer.put(Poll(PollBatch(-1, polled, commands), poll_rows(polled)), timeout_s=1)
            sink(spark.range(0), -1)  # batch -1: its jobs are told apart from the real batch 0
            sink.finish()
        seconds = time.monotonic() - started
        log.info("write path warmed up in %.1fs (Spark, Delta, the payload parse), before the members poll", seconds)
        return seconds
    except Exception as e:  # noqa: BLE001 - best effort: the first real batch warms the path instead
        log.warning("warm-up failed, the first batch will be slower: %s", str(e).splitlines()[0] if str(e) else e)
        return 0.0
    finally:
        for logger, level in zip(quiet, levels, strict=True):
            logger.setLevel(level)
        for t in tables:
            t.close()
        shutil.rmtree(work, ignore_errors=True)
