"""spark-submit job for `bench.formats`' Spark peer on Avro: Spark's Kafka source -> from_avro -> Delta.

Submitted by `bench.contenders.avro` through ./spark-submit.sh (whose --jars hold spark-avro beside
the Delta jars) with the Kafka source jars on the driver classpath, as `kafka_source_to_delta.py`
is. The values are in the Confluent wire format: the 5-byte header (magic byte, schema id) is
stripped with `substring(value, 6)` and the body decoded with `from_avro` and the writer schema
given on the command line (fixed: no registry lookup; FAILFAST, so a body that does not decode
fails the job). Everything else is `kafka_source_to_delta.py`'s: earliest offsets,
Trigger.AvailableNow, the same columns (topic, partition, offset, key, kafka_timestamp + the
record's fields), a Delta append with a checkpoint, and one line `bench-started: <epoch seconds>`
once the SparkSession is up.
"""

from __future__ import annotations

import argparse
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro

ARGS = ("--bootstrap", "--topic", "--table", "--checkpoint", "--avro-schema")


def kafka_avro_rows(spark: SparkSession, bootstrap: str, topic: str, avro_schema: str) -> DataFrame:
    """The topic from its earliest offsets, each value's body decoded with `avro_schema`."""
    records = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    body = F.expr("substring(value, 6)")  # after the magic byte and the 4-byte schema id
    return records.select(
        "topic",
        "partition",
        "offset",
        "key",
        F.col("timestamp").alias("kafka_timestamp"),
        from_avro(body, avro_schema, {"mode": "FAILFAST"}).alias("v"),
    ).select("topic", "partition", "offset", "key", "kafka_timestamp", "v.*")


def main() -> None:
    p = argparse.ArgumentParser()
    for name in ARGS:
        p.add_argument(name, required=True)
    args = p.parse_args()
    spark = SparkSession.builder.appName("bench-spark-kafka-source-avro").getOrCreate()
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    print(f"bench-started: {time.time():.3f}", flush=True)
    rows = kafka_avro_rows(spark, args.bootstrap, args.topic, args.avro_schema)
    query = (
        rows.writeStream.format("delta")
        .option("checkpointLocation", args.checkpoint)
        .outputMode("append")
        .trigger(availableNow=True)
        .start(args.table)
    )
    query.awaitTermination()
    print(f"bench-finished: {time.time():.3f}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
