"""spark-submit job for contender (e), the sink ceiling: the workload's rows, already in Arrow in
the driver, appended to a fresh Delta table through Sharelake's own write path, with no Kafka.

Submitted by `bench.contenders.sink_ceiling` through ./spark-submit.sh (no extra jars). It builds
the SparkSession as jobs/ingest.py does, then every row first: the topic's records exactly as the
workload produces them (`devkit.workload.record_key` / `record_value`, partition i % P, offsets 0,
1, 2... per partition) in `sharelake.bridge.arrow_rows.RECORD_SCHEMA`, split into batches of
`--batch-rows`. It writes the first batch once to a table of its own beside `--table` (the warm-up:
Sharelake warms its write path before it polls, so the ceiling does too). Only then it prints
`bench-started: <epoch seconds>` and writes each batch as
`DeltaSink._write_main` writes the main table (stamp with a `_row` column, claimed offsets,
`FrameBuilder.frame`, the JSON format's parse (`sharelake.formats.json`), the BAD count observed in the write job,
`main_rows`, `DeltaWriter.append` with the commit metadata), without the dedup caches, the driver
checks or dead letters (the workload has no bad records: a batch that counts any fails the job).
It prints `bench-finished: <epoch seconds>` once the writer is closed, then `commit-steps: <json>`:
the table's commits, the seconds the appends took until durable, and the seconds spent in each step
of their commits (`DeltaWriter`'s `COMMIT_STEPS`), summed.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import pyarrow as pa
from pyspark.sql import Observation, SparkSession
from pyspark.sql import functions as F

from devkit.workload import record_key, record_value
from sharelake.bridge.arrow_rows import RECORD_SCHEMA
from sharelake.cli import start_logging
from sharelake.formats.base import BAD
from sharelake.formats.json import JsonFormat, JsonSettings
from sharelake.run.spark_session import build_spark
from sharelake.sink.dedup.commit_log import user_metadata_json
from sharelake.sink.dedup.dedup_table import micros
from sharelake.sink.delta.checkpointer import Checkpointer
from sharelake.sink.delta.commit_lock import commit_lock
from sharelake.sink.delta.frames import FrameBuilder
from sharelake.sink.delta.writer import DeltaWriter, writer_session
from sharelake.table.columns import stamped
from sharelake.table.location import TableLocation
from sharelake.table.offset_ranges import BatchOffsets

TOPIC = "sink-ceiling"
ROW = "_row"  # as sharelake.sink.batch.table_writer.ROW: the row's index in the batch, carried through Spark


class CommitSteps:
    """The seconds the table's appends spent in each step of their commits (`DeltaWriter`'s `stats`)."""

    def __init__(self) -> None:
        self.commit_conflicts = 0
        self.commit_conflict_s = 0.0
        self.commit_step_s: dict[str, float] = defaultdict(float)
        self.key_appends = 0


def record_batches(records: int, partitions: int, batch_rows: int) -> list[pa.Table]:
    """Records 0..records-1 as the workload topic holds them, in RECORD_SCHEMA, `batch_rows` per table."""
    now_ms = int(time.time() * 1000)
    out = []
    for start in range(0, records, batch_rows):
        ids = range(start, min(records, start + batch_rows))
        n = len(ids)
        columns = [
            pa.array([TOPIC] * n, pa.string()),
            pa.array([i % partitions for i in ids], pa.int32()),
            pa.array([i // partitions for i in ids], pa.int64()),
            pa.array([record_key(i) for i in ids], pa.binary()),
            pa.array([record_value(i) for i in ids], pa.binary()),
            pa.nulls(n, RECORD_SCHEMA.field("headers").type),
            pa.array([now_ms] * n, pa.timestamp("ms", tz="UTC")),
            pa.array([1] * n, pa.int32()),
        ]
        out.append(pa.Table.from_arrays(columns, schema=RECORD_SCHEMA))
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--records", type=int, required=True)
    p.add_argument("--partitions", type=int, required=True)
    p.add_argument("--batch-rows", type=int, required=True)
    p.add_argument("--table", required=True)
    p.add_argument("--schema", required=True, help="the workload's SCHEMA_DDL")
    args = p.parse_args()
    start_logging()
    spark = build_spark("bench-sink-ceiling")
    fmt = JsonFormat(JsonSettings(schema=args.schema))
    table = TableLocation.at(args.table)
    fmt.start(spark, table)
    batches = record_batches(args.records, args.partitions, args.batch_rows)
    warm_up = TableLocation.at(f"{args.table}_warm_up")
    with table_writer(spark, fmt, warm_up) as (writer, frames):
        append(writer, fmt, frames, batches[0], 0)
    print(f"bench-started: {time.time():.3f}", flush=True)
    steps = CommitSteps()
    appends_s = 0.0
    with table_writer(spark, fmt, table, steps) as (writer, frames):
        for batch_id, records in enumerate(batches):
            started = time.perf_counter()
            append(writer, fmt, frames, records, batch_id)
            appends_s += time.perf_counter() - started
    print(f"bench-finished: {time.time():.3f}", flush=True)
    summary = {"commits": len(batches), "appends_s": round(appends_s, 3)}
    summary.update({step: round(s, 3) for step, s in steps.commit_step_s.items()})
    print(f"commit-steps: {json.dumps(summary)}", flush=True)
    spark.stop()


@contextmanager
def table_writer(
    spark: SparkSession, fmt: JsonFormat, table: TableLocation, steps: CommitSteps | None = None
) -> Iterator[tuple[DeltaWriter, FrameBuilder]]:
    """The table's Delta writer and frames on a session of its own (as Sharelake's: a writer reads its
    commits' versions from its session), closed at the end; its commits' steps counted in `steps`."""
    session = writer_session(spark, 100, stats_columns=fmt.stats_columns())
    frames = FrameBuilder(session)
    checkpointer = Checkpointer(session, table, "delta", checkpoint_every=100)
    writer = DeltaWriter(session, table, "delta", checkpointer, commit_lock(table), stats=steps)
    try:
        yield writer, frames
    finally:
        writer.close()
        checkpointer.close()


def append(writer: DeltaWriter, fmt: JsonFormat, frames: FrameBuilder, records: pa.Table, batch_id: int) -> None:
    """One batch through Sharelake's write path, until its commit is durable; a bad record fails the job."""
    stamp = datetime.now(UTC)
    rows = stamped(records.append_column(ROW, pa.array(range(records.num_rows), pa.int64())), batch_id, stamp)
    claim = BatchOffsets.of_rows(rows)
    _, read = fmt.read(rows)  # json: no driver verdicts, one read for every batch
    parsed = read.parse(frames.frame(rows))
    observed = Observation()
    parsed = parsed.observe(observed, F.count_if(F.col(BAD)).alias("bad"))
    main_rows = read.main_rows(parsed.where(~F.col(BAD)))
    metadata = user_metadata_json(uuid.uuid4().hex, batch_id, claim, micros(stamp))
    proof = writer.append(main_rows, metadata, batch_id, merge_schema=True)  # returns once durable
    bad = int(observed.get["bad"]) if proof is not None else 0
    if proof is None or bad:
        raise SystemExit(f"batch {batch_id}: {'no commit' if proof is None else f'{bad} bad records'}")


if __name__ == "__main__":
    main()
