"""Upserts by key (`write.mode = "upsert"`): one row per key, the newest record's, exactly once.

Real Delta tables throughout; the sink is fed batches of records here so that every ordering the
rule must survive is produced on purpose (an older record arriving after a newer one, a tombstone
before a late older record); `test_upsert_ingest.py` runs the whole job against a real broker.
"""

from __future__ import annotations

import json
import queue
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession

from devkit.delta_log import read_commits
from sharelake.acknowledge.lifecycle import PollBatch
from sharelake.acknowledge.proof import RecordState
from sharelake.acknowledge.window import DecisionWindow
from sharelake.bridge.arrow_rows import poll_rows
from sharelake.bridge.record_buffer import Poll, RecordBuffer
from sharelake.bridge.synthetic_record import SyntheticRecord
from sharelake.config.loader import load_config
from sharelake.config.routes import resolve_routes
from sharelake.config.settings import BatchConfig
from sharelake.failures.errors import ConfigError
from sharelake.formats import payload_format
from sharelake.formats.json import JsonSettings
from sharelake.sink.batch.delta_sink import DeltaSink
from sharelake.sink.batch.stats import SinkStats
from sharelake.sink.dead_letter.sinks import DeltaDeadLetters, dead_letter_table
from sharelake.sink.write.append import Append
from sharelake.sink.write.destinations import Destination, main_table
from sharelake.sink.write.key_probe import NewKeys
from sharelake.sink.write.mode_registry import write_mode
from sharelake.sink.write.upsert import Upsert
from sharelake.table.layout import TableLayout
from sharelake.table.location import TableLocation
from tests.table_checks import dead_letters_by_key
from tests.test_lifecycle import state_of
from tests.waiting import wait_for

TOPIC = "accounts"
SCHEMA = "id long, owner string, balance long"


def account(i: int, balance: int) -> bytes:
    return json.dumps({"id": i, "owner": f"owner-{i}", "balance": balance}).encode()


def record(partition: int, offset: int, key: int | str, value: bytes | None) -> SyntheticRecord:
    return SyntheticRecord(TOPIC, partition, offset, key=str(key).encode(), value=value, timestamp_ms=1)


class UpsertSink:
    """A sink upserting the accounts by `id` into `where` (text keys: a tombstone's key is its id)."""

    def __init__(
        self,
        spark: SparkSession,
        where: TableLocation,
        deletes: bool = True,
        debezium: bool = False,
        lock_s: float = 30.0,
        schema: str = SCHEMA,
        layout: TableLayout | None = None,
    ):
        envelope = "debezium" if debezium else "none"
        settings = JsonSettings(
            format="json", schema=schema, key_format="text", allow_null_value=deletes or debezium, envelope=envelope
        )
        self.format = payload_format(settings)
        self.format.start(spark, where)
        self.mode = Upsert(("id",), deletes, envelope=debezium)
        self.mode.check(spark, where, self.format)
        main = main_table(
            spark, where, self.format, checkpoint_every=100, lookback_commits=1000, upserted=True, layout=layout
        )
        self.table = main.table
        self.table.load()
        dead = dead_letter_table(spark, where.dead_letter(), checkpoint_every=100, lookback_commits=None)
        self.dead = dead.table
        self.buffer = RecordBuffer(100_000)
        destinations = [Destination.of((TOPIC,), main, self.format, self.mode)]
        dead_letters = DeltaDeadLetters(self.dead, dead.frames)
        self.sink = DeltaSink(
            self.buffer,
            destinations,
            dead_letters,
            BatchConfig(max_wait_ms=0),
            5,
            DecisionWindow.record_lock(lock_s),
            "t",
        )
        self.spark = spark
        self.batch_id = 0

    def run(self, records: list[SyntheticRecord]) -> PollBatch:
        poll = self.put(records)
        self.sink(self.spark.range(1), self.batch_id)
        self.batch_id += 1
        return poll

    def put(self, records: list[SyntheticRecord]) -> PollBatch:
        """One poll of `records` into the buffer (the next batch drains it)."""
        polled: Any = records
        poll = PollBatch(0, polled, queue.Queue())
        assert self.buffer.put(Poll(poll, poll_rows(polled)), 1)
        return poll

    def close(self) -> None:
        self.sink.finish()
        self.table.close()
        self.dead.close()


def rows_of(spark: SparkSession, where: TableLocation) -> Any:
    return spark.read.format("delta").load(where.path).select("id", "balance", "__deleted", "offset").orderBy("id")


def test_the_newest_record_of_a_key_wins_whatever_order_and_a_delete_is_remembered(
    spark: SparkSession, tmp_path: Path
) -> None:
    where = TableLocation.at(tmp_path / "accounts")
    sink = UpsertSink(spark, where)
    polls = []
    try:
        polls.append(
            sink.run(
                [
                    record(0, 0, 1, account(1, 10)),
                    record(0, 1, 1, account(1, 11)),  # newer, same batch: wins
                    record(0, 2, 2, account(2, 20)),
                    record(0, 7, 3, account(3, 37)),  # a newer one than any of key 3 to come
                    record(0, 8, 4, account(4, 48)),
                    record(0, 3, 5, b'{"owner": "nobody", "balance": 5}'),  # no id: missing_key
                ]
            )
        )
        polls.append(
            sink.run(
                [
                    record(0, 4, 3, account(3, 34)),  # late and older: must not overwrite offset 7
                    record(0, 9, 2, None),  # tombstone of key 2
                    record(0, 10, 1, account(1, 110)),
                    record(1, 0, 4, account(4, 400)),  # key 4 from another partition: (1, 0) > (0, 8)
                ]
            )
        )
        polls.append(sink.run([record(0, 6, 2, account(2, 26))]))  # older than the tombstone: stays deleted
        polls.append(
            sink.run([record(0, 1, 1, account(1, 11)), record(0, 11, 2, account(2, 211))])
        )  # redelivery; 2 back
    finally:
        sink.close()

    expected = spark.createDataFrame(
        [(1, 110, False, 10), (2, 211, False, 11), (3, 37, False, 7), (4, 400, False, 0)],
        "id long, balance long, __deleted boolean, offset long",
    )
    assert_df_equality(rows_of(spark, where), expected, ignore_nullable=True)
    parked = dead_letters_by_key(spark, where.dead_letter().path)
    assert {k: r["error_class"] for k, r in parked.items()} == {"5": "missing_key"}
    states = [state_of(p, i) for p in polls for i in range(len(p))]
    assert states.count(RecordState.REJECTED) == 1
    assert set(states) == {RecordState.ACCEPTED, RecordState.REJECTED}
    assert sink.sink.stats.upsert_superseded >= 1 and sink.sink.stats.upsert_split_keys == 0


def test_a_tombstone_deletes_its_key_until_a_newer_record(spark: SparkSession, tmp_path: Path) -> None:
    where = TableLocation.at(tmp_path / "accounts")
    sink = UpsertSink(spark, where)
    try:
        sink.run([record(0, 0, 7, account(7, 1)), record(0, 5, 7, None), record(0, 6, 8, None)])  # 8: never lived
        sink.run([record(0, 3, 7, account(7, 3))])  # older than the tombstone, first seen after it
    finally:
        sink.close()
    expected = spark.createDataFrame(
        [(7, None, True, 5), (8, None, True, 6)], "id long, balance long, __deleted boolean, offset long"
    )
    assert_df_equality(rows_of(spark, where), expected, ignore_nullable=True)


def test_a_table_keeps_the_mode_it_was_created_in(spark: SparkSession, tmp_path: Path) -> None:
    where = TableLocation.at(tmp_path / "accounts")
    sink = UpsertSink(spark, where)
    try:
        sink.run([record(0, 0, 1, account(1, 10))])
    finally:
        sink.close()
    fmt = payload_format(JsonSettings(format="json", schema=SCHEMA))
    fmt.start(spark, where)
    with pytest.raises(ConfigError, match=r"is an upserted table .* write.mode = 'append'"):
        Append(others=[Upsert]).check(spark, where, fmt)
    with pytest.raises(ConfigError, match=r"write.keys names account_id, not a column of the table \(topic, partition"):
        Upsert(("account_id",), False).check(spark, where, fmt)


def test_each_route_gets_the_mode_its_write_keys_ask_for(spark: SparkSession) -> None:
    """Built from the route's config, knowing the other modes (whose tables it refuses); a mode's
    counters are the sink's."""
    required = ["kafka.bootstrap_servers=h:1", "kafka.topic=t", "kafka.group_id=g", "delta.table_path=/tmp/x"]
    appended = write_mode(resolve_routes(load_config(None, required)).main[0])
    upsert = ["write.mode=upsert", 'write.keys=["id"]', "write.delete_on_tombstone=true"]
    upserted = write_mode(resolve_routes(load_config(None, [*required, *upsert])).main[0])
    assert isinstance(appended, Append) and appended.others == (Upsert,)
    assert isinstance(upserted, Upsert) and upserted.others == (Append,)
    assert (upserted.keys, upserted.deletes, upserted.envelope, upserted.key) == (("id",), True, False, "write")
    assert upserted.merges_by_key and not appended.merges_by_key
    stats = SinkStats()
    stats.add(dict.fromkeys(upserted.counters, 2))
    assert (stats.upsert_superseded, stats.upsert_split_keys) == (2, 2)
    with pytest.raises(ValueError, match="not a counter"):
        stats.add({"upsert_renamed": 1})


def test_a_mode_refuses_an_envelope_it_does_not_take_when_it_is_built(spark: SparkSession) -> None:
    """Debezium's change events are applied by key: a route appending them is refused at start with the
    upsert's line (the config's models cannot ask the modes); the banner's note is the mode's."""
    required = ["kafka.bootstrap_servers=h:1", "kafka.topic=t", "kafka.group_id=g", "delta.table_path=/tmp/x"]
    events = [*required, "payload.format=json", "payload.schema=id long", "payload.envelope=debezium"]
    appending = resolve_routes(load_config(None, events)).main[0]
    with pytest.raises(ConfigError) as refused:
        write_mode(appending)
    assert str(refused.value) == (
        'payload.envelope = "debezium" upserts change events by key: set write.mode = "upsert" and write.keys '
        "(the table's key columns)"
    )
    upserting = resolve_routes(load_config(None, [*events, "write.mode=upsert", 'write.keys=["id"]'])).main[0]
    assert write_mode(upserting).note() == ", upserted by id"
    assert write_mode(resolve_routes(load_config(None, required)).main[0]).note() == ""


def event(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None, wrapped: bool = False) -> bytes:
    """A Debezium change event as its JSON converter writes it (`wrapped`: with schemas on)."""
    body = {"before": before, "after": after, "op": op, "source": {"connector": "postgresql"}, "ts_ms": 1}
    return json.dumps({"schema": {"type": "struct"}, "payload": body} if wrapped else body).encode()


def test_debezium_json_events_insert_update_and_delete(spark: SparkSession, tmp_path: Path) -> None:
    where = TableLocation.at(tmp_path / "accounts")
    sink = UpsertSink(spark, where, deletes=False, debezium=True)  # Debezium's deletes need no flag
    a1, a2 = {"id": 1, "owner": "ann", "balance": 10}, {"id": 1, "owner": "ann", "balance": 15}
    b1, c1 = {"id": 2, "owner": "bob", "balance": 20}, {"id": 3, "owner": "cy", "balance": 30}
    try:
        sink.run(
            [
                record(0, 0, '{"id": 1}', event("r", None, a1)),  # the snapshot
                record(0, 1, '{"id": 2}', event("c", None, b1, wrapped=True)),
                record(0, 2, '{"id": 3}', event("c", None, c1)),
                record(0, 3, '{"id": 1}', event("u", a1, a2)),
                record(0, 4, "x", event("t", None, None)),  # a truncate: no row of the table
            ]
        )
        sink.run(
            [
                record(0, 5, '{"id": 2}', event("d", b1, None, wrapped=True)),
                record(0, 6, '{"schema": {}, "payload": {"id": 2}}', None),  # its tombstone, a JSON key
                record(0, 7, '{"id": 3}', event("d", c1, None)),
                record(0, 1, '{"id": 2}', event("c", None, b1, wrapped=True)),  # a redelivery: changes nothing
            ]
        )
    finally:
        sink.close()
    expected = spark.createDataFrame(
        [(1, 15, False, 3), (2, None, True, 6), (3, None, True, 7)],
        "id long, balance long, __deleted boolean, offset long",
    )
    assert_df_equality(rows_of(spark, where), expected, ignore_nullable=True)
    table = spark.read.format("delta").load(where.path)
    assert {"before", "after", "op", "payload", "source"}.isdisjoint(table.columns)
    parked = dead_letters_by_key(spark, where.dead_letter().path)
    assert {k: r["error_class"] for k, r in parked.items()} == {"x": "unsupported_op"}


def test_a_batch_whose_merge_would_outlast_half_the_lock_takes_fewer_polls(spark: SparkSession, tmp_path: Path) -> None:
    """With a 1 s record lock no MERGE fits in half of it: once two rounds have shown their cost,
    a round takes one poll of the three waiting, and the next rounds the rest, each landed in a
    commit of its own (one micro-batch lands them all, round after round): a MERGE, or, once a MERGE
    found every key new, an append of keys the table lacks."""
    where = TableLocation.at(tmp_path / "accounts")
    sink = UpsertSink(spark, where, lock_s=1.0)
    try:
        sink.run([record(0, 0, 1, account(1, 1))])  # creates the table
        sink.run([record(0, 1, 1, account(1, 2)), record(0, 2, 2, account(2, 2))])  # a MERGE: its cost known
        before = len(read_commits(Path(where.path)))
        waiting = [sink.put([record(0, 3 + i, 10 + i, account(10 + i, i))]) for i in range(3)]
        sink.sink(spark.range(1), sink.batch_id)
        assert sink.buffer.records == 0
    finally:
        sink.close()
    assert all(state_of(p, 0) is RecordState.ACCEPTED for p in waiting)
    landed = read_commits(Path(where.path))[before:]
    assert [c.version for c in landed] == list(range(before, before + 3))  # one poll (one record) a commit
    assert [c.operation for c in landed] == ["MERGE", "WRITE", "WRITE"]
    assert rows_of(spark, where).count() == 5


def test_a_payload_schema_without_a_column_the_table_has_upserts_it_as_null(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A MERGE names every column of the table (an append does not): a field an earlier schema had
    is null in the rows a record of the new schema replaces or inserts."""
    where = TableLocation.at(tmp_path / "accounts")
    first = UpsertSink(spark, where)
    try:
        first.run([record(0, 0, 1, account(1, 10)), record(0, 1, 2, account(2, 20))])
    finally:
        first.close()
    second = UpsertSink(spark, where, schema="id long, owner string")  # `balance` dropped
    try:
        second.run([record(0, 2, 1, account(1, 11)), record(0, 3, 3, account(3, 30))])
    finally:
        second.close()
    expected = spark.createDataFrame(
        [(1, None, False, 2), (2, 20, False, 1), (3, None, False, 3)],
        "id long, balance long, __deleted boolean, offset long",
    )
    assert_df_equality(rows_of(spark, where), expected, ignore_nullable=True)


def test_an_upserted_table_clustered_by_its_key(spark: SparkSession, tmp_path: Path) -> None:
    """What docs/upserts.md advises for pruning: the key as the clustering column, set when the
    table is created; the MERGEs after it keep one row per key."""
    where = TableLocation.at(tmp_path / "accounts")
    sink = UpsertSink(spark, where, layout=TableLayout(cluster_by=("id",)))
    try:
        sink.run([record(0, 0, 1, account(1, 10)), record(0, 1, 2, account(2, 20))])
        sink.run([record(0, 2, 1, account(1, 11)), record(0, 3, 2, None), record(0, 4, 3, account(3, 30))])
    finally:
        sink.close()
    expected = spark.createDataFrame(
        [(1, 11, False, 2), (2, None, True, 3), (3, 30, False, 4)],
        "id long, balance long, __deleted boolean, offset long",
    )
    assert_df_equality(rows_of(spark, where), expected, ignore_nullable=True)
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{where.path}`").first()
    assert detail is not None and list(detail["clusteringColumns"]) == ["id"]


def test_keys_the_table_lacks_are_appended_and_keys_it_holds_merged(spark: SparkSession, tmp_path: Path) -> None:
    where = TableLocation.at(tmp_path / "accounts")
    sink = UpsertSink(spark, where)
    try:
        sink.run([record(0, 0, 1, account(1, 10)), record(0, 1, 2, account(2, 20))])  # creates the table
        sink.run([record(0, 2, 3, account(3, 30)), record(0, 3, 3, account(3, 31)), record(0, 4, 4, None)])  # all new
        sink.run([record(0, 5, 1, account(1, 15)), record(0, 6, 5, account(5, 50))])  # key 1 held: merged
        sink.run([record(0, 7, 6, account(6, 60))])  # new, after a MERGE of held keys: merged, inserting all
        sink.run([record(0, 8, 7, account(7, 70))])  # so the next new keys are appended again
        sink.run([record(1, 0, 3, account(3, 300)), record(0, 9, 8, account(8, 80))])  # 3 held (newer): merged
    finally:
        sink.close()
    appended = sink.table.stats.key_appends
    # a later run starts where the table's latest commit says: a MERGE that found a key, so it merges first
    restarted = UpsertSink(spark, where)
    try:
        restarted.run([record(0, 10, 9, account(9, 90))])
        restarted.run([record(0, 11, 10, account(10, 100))])
    finally:
        restarted.close()

    expected = spark.createDataFrame(
        [
            (1, 15, False, 5),
            (2, 20, False, 1),
            (3, 300, False, 0),
            (4, None, True, 4),
            (5, 50, False, 6),
            (6, 60, False, 7),
            (7, 70, False, 8),
            (8, 80, False, 9),
            (9, 90, False, 10),
            (10, 100, False, 11),
        ],
        "id long, balance long, __deleted boolean, offset long",
    )
    assert_df_equality(rows_of(spark, where), expected, ignore_nullable=True)
    operations = [c.operation for c in read_commits(Path(where.path))]
    assert operations == ["WRITE", "WRITE", "MERGE", "MERGE", "WRITE", "MERGE", "MERGE", "WRITE"], operations
    assert (appended, restarted.table.stats.key_appends) == (2, 1)


def test_a_key_another_writer_commits_before_the_append_of_it_is_merged(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    where = TableLocation.at(tmp_path / "accounts")
    go = tmp_path / "go"
    first, second = UpsertSink(spark, where), UpsertSink(spark, where)  # two jobs' sinks on one table
    try:
        first.run([record(0, 0, 1, account(1, 10))])  # creates the table
        # the first job's append of keys 3 and 4, checked new on its snapshot, waits with its files written ...
        monkeypatch.setenv("SHARELAKE_FAULTS", f"wait@delta_files_written#1={go}")
        appending = threading.Thread(
            target=first.run, args=([record(0, 5, 3, account(3, 35)), record(0, 6, 4, account(4, 40))],)
        )
        appending.start()
        wait_for(go.with_name("go.waiting").exists, 120, "the first job's append never wrote its files")
        second.run([record(0, 9, 3, account(3, 39))])  # ... while the second job commits a newer record of key 3
        go.touch()
        appending.join(120)
        assert not appending.is_alive()
    finally:
        go.touch()
        first.close()
        second.close()

    # the append was sent back by the second job's commit, found key 3 held on the newer snapshot and merged:
    # one row per key, key 3 at its newest record
    expected = spark.createDataFrame(
        [(1, 10, False, 0), (3, 39, False, 9), (4, 40, False, 6)],
        "id long, balance long, __deleted boolean, offset long",
    )
    assert_df_equality(rows_of(spark, where), expected, ignore_nullable=True)
    assert [c.operation for c in read_commits(Path(where.path))] == ["WRITE", "WRITE", "MERGE"]
    assert first.table.stats.commit_conflicts == 1 and first.table.stats.key_appends == 0


def test_two_batches_keys_are_compared_in_the_driver(spark: SparkSession) -> None:
    def keys(table: pa.Table) -> NewKeys:
        return NewKeys(table, spark.createDataFrame, {})

    created = keys(pa.table({"id": [1, 2], "region": ["eu", "us"]}))
    assert keys(pa.table({"id": [2, 3], "region": ["us", "us"]})).among(created)
    assert not keys(pa.table({"id": [2, 3], "region": ["eu", "eu"]})).among(created)  # (2, eu) is new
    struct = pa.table({"key": [{"id": 1}]})  # keys Arrow cannot join: taken as held, so the MERGE runs
    assert keys(struct).among(keys(struct))
