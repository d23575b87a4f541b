"""spark-submit job for contender (b): Spark's built-in Kafka source -> from_json -> Delta append.

Submitted by `bench.contenders.spark_kafka_source` through ./spark-submit.sh with the Kafka source
jars on the driver classpath. It reads the topic from the earliest offsets with
Trigger.AvailableNow (everything present at start, then stop), keeps the same columns as
Sharelake's json table (topic, partition, offset, key, kafka_timestamp + the parsed fields), and
appends to Delta with a checkpoint. It prints one line, `bench-started: <epoch seconds>`, taken
after the SparkSession is up and before the query is defined. `kafka_rows` is shared with the
latency phase's continuous job (`kafka_source_continuous.py`). With `--avro-schema` (`bench.formats`'
Avro peer; spark-submit.sh's --jars hold spark-avro) the values are in the Confluent wire format:
the 5-byte header (magic byte, schema id) is cut off with `substring(value, 6)` and the body decoded
with `from_avro` and that writer schema (fixed: no registry lookup; FAILFAST, so a body that does
not decode fails the job).
"""

from __future__ import annotations

import argparse
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro

from sharelake.run.spark_session import build_spark

ARGS = ("--bootstrap", "--topic", "--table", "--checkpoint", "--schema")


def kafka_rows(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    schema: str,
    avro_schema: str | None = None,
    max_offsets: int | None = None,
) -> DataFrame:
    """The topic from its earliest offsets as Sharelake's json (or avro) table lays it out
    (`max_offsets`: records per micro-batch, Spark's maxOffsetsPerTrigger)."""
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    if max_offsets is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    records = reader.load()
    value = (
        F.from_json(F.col("value").cast("string"), schema)
        if avro_schema is None
        else from_avro(F.expr("substring(value, 6)"), avro_schema, {"mode": "FAILFAST"})
    )
    return records.select(
        "topic",
        "partition",
        "offset",
        "key",
        F.col("timestamp").alias("kafka_timestamp"),
        value.alias("v"),
    ).select("topic", "partition", "offset", "key", "kafka_timestamp", "v.*")


def main() -> None:
    p = argparse.ArgumentParser()
    for name in ARGS:
        p.add_argument(name, required=True)
    p.add_argument("--avro-schema", help="the values are Confluent wire-format Avro of this writer schema")
    args = p.parse_args()
    spark = build_spark("bench-spark-kafka-source")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    print(f"bench-started: {time.time():.3f}", flush=True)
    rows = kafka_rows(spark, args.bootstrap, args.topic, args.schema, args.avro_schema)
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
