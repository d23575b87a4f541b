"""spark-submit job for the latency phase's anchor: Spark's Kafka source -> from_json -> Delta, running
continuously with a processing-time trigger until it is stopped.

Submitted by `bench.contenders.spark_kafka_source.start_continuous` (called by `bench.latency`)
through ./spark-submit.sh with the Kafka source jars on the driver classpath, on a fresh topic
that the latency phase fills at a fixed rate. It reads from the earliest offsets (the topic is new,
so that is every record), keeps Sharelake's json table layout (`kafka_rows` of
`kafka_source_to_delta.py`: topic, partition, offset, key, kafka_timestamp + the parsed fields)
and appends every micro-batch to Delta with `Trigger.ProcessingTime(--trigger)` (default
"0 seconds": the next batch starts as soon as the last one ends). It prints
`bench-started: <epoch seconds>` once the SparkSession is up; the harness starts the load then,
and stops the job with SIGTERM to its process group once every produced record is in the table.
"""

from __future__ import annotations

import argparse
import time

from bench.spark_jobs.kafka_source_to_delta import ARGS, kafka_rows
from sharelake.run.spark_session import build_spark


def main() -> None:
    p = argparse.ArgumentParser()
    for name in ARGS:
        p.add_argument(name, required=True)
    p.add_argument("--trigger", default="0 seconds", help="Trigger.ProcessingTime interval")
    args = p.parse_args()
    spark = build_spark("bench-spark-kafka-source-continuous")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    print(f"bench-started: {time.time():.3f}", flush=True)
    query = (
        kafka_rows(spark, args.bootstrap, args.topic, args.schema)
        .writeStream.format("delta")
        .option("checkpointLocation", args.checkpoint)
        .outputMode("append")
        .trigger(processingTime=args.trigger)
        .start(args.table)
    )
    print(f"bench-query-started: {time.time():.3f}", flush=True)
    query.awaitTermination()  # until the harness's SIGTERM (or the query fails)


if __name__ == "__main__":
    main()
