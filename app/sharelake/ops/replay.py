"""Re-publishes dead-letter records to Kafka after a fix, and marks them replayed.

Selects the dead-letter rows not
replayed yet that match a SQL filter, produces each record's raw key, value and headers (plus a
`sharelake.replay_of` header naming the original topic/partition/offset) to its original topic or
to `to_topic` with an idempotent producer, waits for every delivery, and only then marks exactly
those rows `replayed_at` / `replayed_to` (one Delta MERGE, retried on conflicts with a running
ingest job). Running it twice replays nothing the second time. A crash between the deliveries and
the MERGE leaves the rows unmarked, so the next run publishes them again: at least once, never lost.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from confluent_kafka import KafkaError, Message, Producer
from delta.tables import DeltaTable
from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from tenacity import Retrying, stop_after_attempt, wait_exponential_jitter

from sharelake.config.settings import SharelakeConfig
from sharelake.failures.errors import ConfigError
from sharelake.sink.dead_letter.factory import dead_letter_sink
from sharelake.sink.delta.catalog_tables import located_routes
from sharelake.sink.delta.commit_lock import commit_lock
from sharelake.table.location import TableLocation

log = logging.getLogger(__name__)

REPLAY_HEADER = "sharelake.replay_of"
MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # the producer's bound; the topic's max.message.bytes still applies


class ReplayError(RuntimeError):
    """Some records could not be re-published; none were marked replayed."""


@dataclass(frozen=True)
class ReplayResult:
    published: int
    topics: tuple[str, ...]


def replay_dead_letters(
    spark: SparkSession, cfg: SharelakeConfig, where: str | None = None, to_topic: str | None = None
) -> ReplayResult:
    routes = located_routes(spark, cfg)
    if routes.dead_letter is None:  # a sink that writes no table: it says where its dead letters are
        sink = dead_letter_sink(cfg)
        raise ConfigError(f'dead_letter.sink = "{sink.name}": the dead letters are {sink.kept}')
    path = routes.dead_letter.path
    if not DeltaTable.isDeltaTable(spark, path):
        raise ConfigError(
            f"{routes.dead_letter_key} = {routes.dead_letter.describe()!r}: no dead-letter table there yet; point it "
            "at the table the ingest job writes (default: the main table's + '_dead_letter')"
        )
    rows = spark.read.format("delta").load(path).where(F.col("replayed_at").isNull())
    if where:
        try:
            rows = rows.where(where)
            rows.schema  # noqa: B018 - resolves the filter now, so a bad one fails here
        except (AnalysisException, ParseException) as e:
            reason = str(e).strip().splitlines()[0][:160]
            raise ConfigError(
                f"--where {where!r}: not a filter on the dead-letter table ({reason}); use its columns, e.g. "
                "\"error_class = 'schema_mismatch'\""
            ) from None
    selected = rows.select("topic", "partition", "offset", "key", "value", "headers").orderBy(
        "topic", "partition", "offset"
    )

    producer = Republisher(cfg)
    keys: list[tuple[str, int, int]] = []
    topics: set[str] = set()
    for r in selected.toLocalIterator():  # one Spark partition at a time: bounded driver memory
        target = to_topic or r["topic"]
        headers = [(h["key"], h["value"]) for h in (r["headers"] or [])]
        producer.send(target, r["key"], r["value"], headers, (r["topic"], int(r["partition"]), int(r["offset"])))
        keys.append((r["topic"], int(r["partition"]), int(r["offset"])))
        topics.add(target)
    producer.finish("nothing was marked replayed")
    if keys:
        _mark_replayed(spark, path, keys, to_topic)
    log.info("replayed %d dead-letter records to %s", len(keys), ", ".join(sorted(topics)) or "-")
    return ReplayResult(len(keys), tuple(sorted(topics)))


class Republisher:
    """An idempotent producer that sends records back with a REPLAY_HEADER naming where each came from.

    Shared by both replays (the dead-letter table's, here, and the broker dead-letter topic's,
    sharelake.ops.replay_broker_topic); `finish` waits for every delivery and raises ReplayError if any failed."""

    def __init__(self, cfg: SharelakeConfig):
        self._producer = Producer(
            {**cfg.kafka.client_config(), "enable.idempotence": True, "message.max.bytes": MAX_MESSAGE_BYTES}
        )
        self._failures: list[KafkaError] = []

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, str | bytes | None]],
        origin: tuple[str, int, int],
    ) -> None:
        marked = [*headers, (REPLAY_HEADER, "/".join(str(x) for x in origin).encode())]
        while True:
            try:
                self._producer.produce(topic, key=key, value=value, headers=marked, on_delivery=self._delivered)
                break
            except BufferError:
                self._producer.poll(0.1)
        self._producer.poll(0)

    def finish(self, consequence: str) -> None:
        """Wait for every delivery; ReplayError naming `consequence` (what was therefore not done) if any failed."""
        remaining = self._producer.flush(120)
        if self._failures or remaining:
            raise ReplayError(
                f"{len(self._failures)} records failed to publish ({self._failures[:1]}), {remaining} undelivered: "
                f"{consequence}; fix the cause and run the replay again"
            )

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self._failures.append(err)


def _mark_replayed(spark: SparkSession, path: str, keys: list[tuple[str, int, int]], to_topic: str | None) -> None:
    marks = spark.createDataFrame(keys, "topic string, partition int, offset long")
    target = F.lit(to_topic) if to_topic else F.col("d.topic")
    for attempt in Retrying(
        stop=stop_after_attempt(8), wait=wait_exponential_jitter(multiplier=0.5, max=10), reraise=True
    ):
        with attempt, commit_lock(TableLocation.at(path))():  # the drivers on its disk commit one at a time
            (
                DeltaTable.forPath(spark, path)
                .alias("d")
                .merge(
                    marks.alias("k"),
                    "d.topic = k.topic AND d.partition = k.partition AND d.offset = k.offset AND d.replayed_at IS NULL",
                )
                .whenMatchedUpdate(set={"replayed_at": F.current_timestamp(), "replayed_to": target})
                .execute()
            )
