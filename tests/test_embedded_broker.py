"""The embedded broker launcher: start, a share-group round trip, stop, restart on the same data."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from sharelake.consume.share.group_settings import read_group_settings
from sharelake.testing import kafka_broker
from sharelake.testing.kafka_broker import EmbeddedKafka
from tests.kafka_helpers import share_receive


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for v in values:
        p.produce(topic, value=v)
    assert p.flush(30) == 0


def test_start_share_round_trip_stop_restart_same_data(tmp_path: Path) -> None:
    kafka = EmbeddedKafka(tmp_path / "kafka")
    try:
        kafka.start()
        assert kafka.is_running()
        kafka.create_topic("launcher", partitions=1)
        produce(kafka.bootstrap, "launcher", [b"one"])
        # share groups are on: a share consumer gets the record (group set to earliest)
        assert share_receive(kafka, "launcher", "g-first", seconds=30, expect=1, earliest=True) == [(0, 0)]
        assert read_group_settings(kafka.admin(), "g-first")["share.auto.offset.reset"] == "earliest"
        port = kafka.port

        kafka.stop()
        assert not kafka.is_running()

        kafka.start()  # same data dir: same ports, same cluster, the record is still there
        assert kafka.port == port
        assert "launcher" in kafka.admin().list_topics(timeout=10).topics
        produce(kafka.bootstrap, "launcher", [b"two"])
        # the first group already ACCEPTed offset 0: after the restart it gets only the new record
        assert share_receive(kafka, "launcher", "g-first", seconds=30, expect=1) == [(0, 1)]
        # a new group reading from the earliest offset sees both
        assert sorted(share_receive(kafka, "launcher", "g-new", seconds=30, expect=2, earliest=True)) == [
            (0, 0),
            (0, 1),
        ]
    finally:
        kafka.stop()
    # the broker's own log is kept in its data dir, across restarts: both starts are in it
    log = (tmp_path / "kafka" / "logs" / "server.log").read_text(errors="replace")
    assert log.count("Kafka Server started") == 2, log[-3000:]


def test_cluster_id_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    # 0xF8 encodes to '-' as the first base64 character: one random id in 64 starts so
    draws = iter([uuid.UUID(bytes=b"\xf8" + b"\x00" * 15), uuid.UUID(bytes=b"\x01" * 16)])
    monkeypatch.setattr(kafka_broker.uuid, "uuid4", lambda: next(draws))
    assert kafka_broker.cluster_id() == "AQEBAQEBAQEBAQEBAQEBAQ"


def test_broker_formats_and_starts_with_a_dash_cluster_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the id a CI run once drew at random failed the storage tool's argument parsing
    monkeypatch.setattr(kafka_broker, "cluster_id", lambda: "-AECAwQFBgcICQoLDA0ODw")
    with EmbeddedKafka(tmp_path / "kafka") as kafka:
        assert kafka.is_running()
        meta = (tmp_path / "kafka" / "kraft" / "meta.properties").read_text()
        assert "cluster.id=-AECAwQFBgcICQoLDA0ODw" in meta
        kafka.create_topic("dash", partitions=1)
        produce(kafka.bootstrap, "dash", [b"one"])
