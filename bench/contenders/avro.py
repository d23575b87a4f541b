"""The Avro contenders: Sharelake and Spark's Kafka source on the Avro topic of `python -m bench formats`.

Each is weighed against its JSON twin (`bench.contenders.sharelake`, `bench.contenders.spark_kafka_source`).

- `run_sharelake_avro`: `./spark-submit.sh jobs/ingest.py` as contender (a), with
  `payload.format=avro` and `payload.registry.url` (writer schemas fetched by id from the registry,
  decoded in Spark with spark-avro's `from_avro`). records/s = the same window as (a)'s: rows
  written / (last Delta commit - start of `run_ingest`).
- `run_spark_kafka_avro`: `bench/spark_jobs/kafka_source_to_delta.py --avro-schema`, Spark's Kafka source
  with `from_avro` on the body after the 5-byte header, the writer schema fixed on the command line
  (no registry). records/s = the same window as (b)'s: rows in the table / (last Delta commit - the
  job's `bench-started` line).
"""

from __future__ import annotations

from bench.avro_workload import AVRO_SCHEMA_JSON
from bench.contenders.base import RunContext, RunResult
from bench.contenders.sharelake import run_sharelake
from bench.contenders.spark_kafka_source import run_spark_kafka_source

SHARELAKE_AVRO = "sharelake-avro"
SPARK_AVRO = "spark-kafka-source-avro"


def avro_payload(registry_url: str) -> tuple[str, ...]:
    """Sharelake's `--set`s for wire-format Avro with writer schemas from the registry."""
    return ("payload.format=avro", f"payload.registry.url={registry_url}")


def run_sharelake_avro(ctx: RunContext, registry_url: str) -> RunResult:
    return run_sharelake(ctx, SHARELAKE_AVRO, payload=avro_payload(registry_url))


def run_spark_kafka_avro(ctx: RunContext) -> RunResult:
    return run_spark_kafka_source(ctx, SPARK_AVRO, "--avro-schema", AVRO_SCHEMA_JSON)
