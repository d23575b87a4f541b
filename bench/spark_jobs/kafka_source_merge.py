"""spark-submit job for `bench.upserts`' peer: Spark's Kafka source -> a hand-written foreachBatch MERGE.

What users of Spark's source write for a table of one row per key (Delta's docs: "upsert from
streaming queries using foreachBatch"): each micro-batch reduced to the newest record per key by
`(partition, offset)`, then one MERGE that replaces a row only with a newer record, inserting new
keys; the first batch creates the table. The same columns as Sharelake's json table
(`kafka_source_to_delta.kafka_rows`); Trigger.AvailableNow (everything present at start, then stop),
in micro-batches of `--max-offsets-per-trigger` records (all in one by default: then the first batch
creates the table and no MERGE runs).
Prints `bench-started: <epoch seconds>` once the SparkSession is up, as the other bench jobs do.
"""

from __future__ import annotations

import argparse
import time

from delta.tables import DeltaTable
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from bench.spark_jobs.kafka_source_to_delta import ARGS, kafka_rows
from sharelake.run.spark_session import build_spark

NEWER = "s.partition > t.partition OR (s.partition = t.partition AND s.offset > t.offset)"


def main() -> None:
    p = argparse.ArgumentParser()
    for name in ARGS:
        p.add_argument(name, required=True)
    p.add_argument("--key", required=True, help="the payload column the table is upserted by")
    p.add_argument("--max-offsets-per-trigger", type=int, help="records per micro-batch (default: all in one)")
    args = p.parse_args()
    spark = build_spark("bench-spark-kafka-merge")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    print(f"bench-started: {time.time():.3f}", flush=True)

    def upsert(batch: DataFrame, batch_id: int) -> None:
        columns = [c for c in batch.columns]
        newest = (
            batch.groupBy(args.key)
            .agg(F.max_by(F.struct(*columns), F.struct("partition", "offset")).alias("r"))
            .select("r.*")
        )
        if not DeltaTable.isDeltaTable(spark, args.table):
            newest.write.format("delta").mode("append").save(args.table)
            return
        target = DeltaTable.forPath(spark, args.table).alias("t")
        merge = target.merge(newest.alias("s"), f"t.`{args.key}` = s.`{args.key}`")
        merge.whenMatchedUpdateAll(condition=NEWER).whenNotMatchedInsertAll().execute()

    rows = kafka_rows(spark, args.bootstrap, args.topic, args.schema, max_offsets=args.max_offsets_per_trigger)
    query = (
        rows.writeStream.foreachBatch(upsert)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    print(f"bench-finished: {time.time():.3f}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
