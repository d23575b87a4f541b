"""Contender (c), a plain Python share-consumer drain without Spark: the client's ceiling.

It runs in the harness process, no job submitted. M threads each own one confluent_kafka
ShareConsumer in explicit acknowledgement mode (as Sharelake's members), acknowledge every record
ACCEPT and commit_sync after each poll; nothing is written anywhere. A run stops when every
consumer has seen nothing for `drain_idle_seconds`, or once the topic's record count is reached.

records/s = records / (time of the last record - time of the first record): no group join and no
idle tail in the window.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from confluent_kafka import AcknowledgeType, KafkaError, KafkaException, ShareConsumer
from confluent_kafka.admin import AdminClient

from bench.contenders.base import RunContext, RunResult, failed
from sharelake.consume.share.group_settings import apply_group_settings

NAME = "share-consumer-drain"
POLL_TIMEOUT_S = 0.2
EMPTY_TIMEOUT_S = 30.0  # no record at all this long after start: give up


@dataclass
class _Tally:
    records: int = 0
    first: float | None = None
    last: float | None = None
    idle_since: float | None = None
    ack_errors: int = 0
    polls: int = 0


class _Member(threading.Thread):
    def __init__(self, idx: int, config: dict[str, str], topic: str, stop: threading.Event) -> None:
        super().__init__(name=f"bench-drain-{idx}", daemon=True)
        self.config, self.topic, self.stop_event = config, topic, stop
        self.tally = _Tally()
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            consumer = ShareConsumer(self.config)
        except BaseException as e:  # noqa: BLE001 - reported by the caller
            self.failure = e
            return
        try:
            consumer.subscribe([self.topic])
            while not self.stop_event.is_set():
                self._poll(consumer)
        except BaseException as e:  # noqa: BLE001 - reported by the caller
            self.failure = e
        finally:
            consumer.close()

    def _poll(self, consumer: ShareConsumer) -> None:
        messages = consumer.poll(POLL_TIMEOUT_S)
        now = time.monotonic()
        t = self.tally
        t.polls += 1
        got = 0
        for m in messages:
            err = m.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(err)
                continue
            consumer.acknowledge(m, AcknowledgeType.ACCEPT)
            got += 1
        if got:
            results = consumer.commit_sync()
            t.ack_errors += sum(1 for r in (results or {}).values() if r is not None)
            t.records += got
            t.first = t.first if t.first is not None else now
            t.last, t.idle_since = time.monotonic(), None
        elif t.idle_since is None:
            t.idle_since = now


def run_share_consumer_drain(ctx: RunContext) -> RunResult:
    group = ctx.group(NAME)
    apply_group_settings(
        AdminClient({"bootstrap.servers": ctx.bootstrap}), group, {"share.auto.offset.reset": "earliest"}
    )
    config = {"bootstrap.servers": ctx.bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"}
    stop = threading.Event()
    members = [_Member(i, config, ctx.topic, stop) for i in range(ctx.members)]
    started = time.monotonic()
    for m in members:
        m.start()
    idle_s = ctx.settings.drain_idle_seconds
    try:
        while True:
            time.sleep(0.1)
            now = time.monotonic()
            tallies = [m.tally for m in members]
            total = sum(t.records for t in tallies)
            if any(m.failure for m in members) or total >= ctx.records:
                break
            if total == 0 and now - started > EMPTY_TIMEOUT_S:
                break
            quiet = all(t.idle_since is not None and now - t.idle_since >= idle_s for t in tallies)
            if total and quiet:
                break
            if now - started > ctx.settings.run_timeout_s:
                break
    finally:
        stop.set()
        for m in members:
            m.join(timeout=30)
    errors = [m.failure for m in members if m.failure]
    if errors:
        return failed(ctx, NAME, f"a consumer failed: {errors[0]!r}")
    tallies = [m.tally for m in members]
    firsts = [t.first for t in tallies if t.first is not None]
    lasts = [t.last for t in tallies if t.last is not None]
    total = sum(t.records for t in tallies)
    if not firsts or not lasts or total == 0:
        return failed(ctx, NAME, "no record was consumed")
    details = {
        "ack_errors": float(sum(t.ack_errors for t in tallies)),
        "polls": float(sum(t.polls for t in tallies)),
        "join_to_first_record_s": min(firsts) - started,
    }
    return RunResult(
        NAME, ctx.phase, ctx.partitions, ctx.members, True, total, max(lasts) - min(firsts), details=details
    )
