"""The pool of share-group members in the driver: M threads, each owning one ShareConsumer.

Built and driven by `app.pipeline`. More members keep more polls in flight: while the records of
one member are being written by the running micro-batch, the others keep polling and fill the
RecordBuffer for the next one. The pool also answers "is the backlog drained?" for the
until-drained run mode, and runs the graceful stop (stop polling, let the sink decide, release
the rest, commit, close).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka import ShareConsumer

from app.bridge.record_buffer import RecordBuffer
from app.config import KafkaConfig, PumpConfig
from app.consume.share_member import ConsumerFactory, MemberStats, ShareMember

log = logging.getLogger(__name__)


def consumer_config(kafka: KafkaConfig, pump: PumpConfig, member_id: int) -> dict[str, Any]:
    return {
        **kafka.client,
        "bootstrap.servers": kafka.bootstrap_servers,
        "group.id": kafka.group_id,
        "client.id": f"sharelake-{kafka.group_id}-{member_id}",
        "share.acknowledgement.mode": "explicit",
        "max.poll.records": pump.max_poll_records,
        "logger": logging.getLogger("sharelake.kafka.client"),  # librdkafka logs into Python logging
    }


class MemberPool:
    def __init__(
        self,
        kafka: KafkaConfig,
        pump: PumpConfig,
        buffer: RecordBuffer,
        consumer_factory: ConsumerFactory = ShareConsumer,
    ):
        self.buffer = buffer
        self.members = [
            ShareMember(
                i, consumer_config(kafka, pump, i), kafka.topic, buffer, pump.poll_timeout_ms / 1000, consumer_factory
            )
            for i in range(pump.members)
        ]

    def start(self) -> None:
        for m in self.members:
            m.start()

    def failures(self) -> list[BaseException]:
        return [m.failure for m in self.members if m.failure is not None]

    def totals(self) -> MemberStats:
        t = MemberStats()
        for m in self.members:
            s = m.stats
            t.polls += s.polls
            t.records += s.records
            t.accepted += s.accepted
            t.released += s.released
            t.rejected += s.rejected
            t.ack_errors += s.ack_errors
            t.poll_errors += s.poll_errors
        return t

    def drained(self, idle_timeout_s: float, empty_timeout_s: float) -> bool:
        """The until-drained test: every member polled and got nothing for long enough, and
        nothing polled is still undecided.

        Long enough is `idle_timeout_s` once any record arrived, `empty_timeout_s` while none has
        (joining the group takes seconds). A member waiting for its records' decisions cannot
        poll, so it never counts as idle (a slow Delta commit is not an empty topic).
        """
        if self.in_flight():
            return False
        needed = idle_timeout_s if self.totals().records else empty_timeout_s
        now = time.monotonic()
        idle = [m.stats.idle_since for m in self.members]
        return all(since is not None and now - since >= needed for since in idle)

    def in_flight(self) -> bool:
        return any(m.holds_records for m in self.members) or self.buffer.records > 0

    def stop(self, timeout_s: float) -> None:
        """Graceful stop within `timeout_s`: stop polling, wait for decisions, release the rest.

        Polls still waiting in the buffer never reach Delta now, so they are RELEASEd (a member
        may still be putting its last poll, hence the loop); polls the running micro-batch took
        are decided by the sink. Past the bound, members RELEASE whatever is still undecided.
        """
        for m in self.members:
            m.stop_polling()
        deadline = time.monotonic() + timeout_s
        while any(m.is_alive() for m in self.members) and time.monotonic() < deadline:
            for batch in self.buffer.take_all():
                batch.release_undecided()
            time.sleep(0.05)
        for m in self.members:
            if m.is_alive():
                log.warning("member %d still holds undecided records at the stop bound: releasing", m.member_id)
                m.abandon()
        for m in self.members:
            m.join(30)
