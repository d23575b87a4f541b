"""The embedded broker launcher: start, a share-group round trip, stop, restart on the same data."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Producer

from app.consume.group_settings import read_group_settings
from app.embedded.kafka_broker import EmbeddedKafka
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
    assert (tmp_path / "kafka" / "logs" / "server.log").stat().st_size > 0
