"""One group member: a thread that exclusively owns one Kafka client of the job's group type.

The client (`GroupClient`, from `sharelake.consume.group_type`'s seam: a share consumer or a classic consumer) is made
in the thread. A started member subscribes at once (it joins the group) and polls only after `start_polling`:
records are acquired in poll(), never before. Its loop is the explicit cycle: poll -> wrap the records in a
`PollBatch`, build their Arrow rows (here, so that the next batch's rows are ready while the sink writes the
current one) and put it in the RecordBuffer -> apply the AckCommands that deciders (the Delta sink, or shutdown)
send for that batch -> once every record is decided, commit -> poll again. The client is never touched from
another thread (it is not thread-safe); other threads only talk to the member through its command queue and
flags (`start_polling`, `pause_polling`, `stop_polling`, `abandon`). A member that fails while it holds records
RELEASEs the undecided ones and commits before it closes; `abandon` (a stop past its bound) RELEASEs them too.
Its counters (`MemberStats`) are written by its thread only.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, Message

from sharelake.acknowledge.lifecycle import AckCommand, PollBatch
from sharelake.acknowledge.proof import Decision
from sharelake.bridge.arrow_rows import poll_rows
from sharelake.bridge.record_buffer import Poll, RecordBuffer
from sharelake.consume.group_type import GroupClient
from sharelake.observe.counters import counter

log = logging.getLogger(__name__)


@dataclass
class MemberStats:
    """Counters one member keeps (written by its thread only, read by anyone; see sharelake.observe.counters)."""

    polls: int = counter("polls that brought records")
    records: int = counter("records polled from the share group", name="polled")
    accepted: int = counter("records ACCEPTed")
    released: int = counter("records RELEASEd (failed writes, stops)")
    rejected: int = counter("records REJECTed (after landing in the dead-letter table)")
    ack_errors: int = counter(
        "acknowledgements the broker refused, one per record (its lock had expired)", prometheus="expired_locks"
    )
    poll_errors: int = counter("polls that failed (retried with backoff)")
    acks_s: float = counter("seconds from a poll's first acknowledgement to its commit returning", default=0.0)
    idle_s: float = counter(
        "seconds the member spent in poll waiting for records (or backing off)", name="member_idle_s", default=0.0
    )
    first_record_at: float | None = None  # time.monotonic() of the first poll that brought records
    # time.monotonic() since which every poll of this member came back empty; None while it has
    # records (a member waiting for decisions is not idle: it cannot poll)
    idle_since: float | None = None


class Member(threading.Thread):
    def __init__(
        self,
        member_id: int,
        new_client: Callable[[], GroupClient],
        topics: list[str],
        buffer: RecordBuffer,
        poll_timeout_s: float,
        lane: int = 0,
    ):
        """`lane`: the buffer's lane its polls go to (the lane of the tables its `topics` are routed to)."""
        super().__init__(name=f"group-member-{member_id}", daemon=True)
        self.member_id = member_id
        self.lane = lane
        self._new_client = new_client
        self._topics = topics
        self._buffer = buffer
        self._poll_timeout_s = poll_timeout_s
        self._commands: queue.Queue[AckCommand] = queue.Queue()
        self._current: PollBatch | None = None
        self._acked_in_current = 0
        self._acks_started = 0.0  # perf_counter() of the current poll's first acknowledgement
        self._stop_polling = threading.Event()
        self._abandon = threading.Event()
        self._polling = threading.Event()  # set by start_polling: until then the member has joined, not polled
        self.stats = MemberStats()
        self._failed_polls = 0  # consecutive failed polls, for the retry backoff
        self.failure: BaseException | None = None

    # -- control, from other threads ---------------------------------------------------------------

    def start_polling(self) -> None:
        """Begin polling. Before this, the started member has subscribed (the share group assigns it
        partitions in the background) but acquired nothing: a share consumer fetches only in poll()."""
        self._polling.set()

    def pause_polling(self) -> None:
        """Poll no more until `start_polling`: the current poll is still decided and committed."""
        self._polling.clear()

    def stop_polling(self) -> None:
        """Finish the current poll's decisions, commit, close; poll no more."""
        self._stop_polling.set()

    def abandon(self) -> None:
        """Shutdown past its bound: RELEASE whatever of the current poll is still undecided."""
        self._stop_polling.set()
        self._abandon.set()

    @property
    def holds_records(self) -> bool:
        return self._current is not None

    # -- the member thread -------------------------------------------------------------------------

    def run(self) -> None:
        try:
            client = self._new_client()
        except BaseException as e:  # noqa: BLE001 - reported to the pool
            self.failure = e
            return
        try:
            client.subscribe(self._topics)
            while not self._polling.wait(0.1):
                if self._stop_polling.is_set():
                    break
            while True:
                if self._current is None:
                    if self._stop_polling.is_set():
                        break
                    if not self._polling.wait(0.1):  # paused: a dependency of the sink is down
                        continue
                    self._poll_once(client)
                else:
                    self._serve_current(client)
        except BaseException as e:
            self.failure = e
            log.exception("member %d failed", self.member_id)
        finally:
            if self._current is not None:  # dying with records: never leave them hanging silently
                self._current.release_undecided()
                self._drain_commands(client)
                self._commit(client)
            try:
                client.close()  # leaves the group
            except KafkaException as e:
                log.warning("member %d close: %s", self.member_id, e)

    def _poll_once(self, client: GroupClient) -> None:
        poll_started = time.monotonic()
        try:
            messages = client.poll(self._poll_timeout_s)
        except KafkaException as e:  # librdkafka reconnects by itself; back off while it does
            self.stats.poll_errors += 1
            self._failed_polls += 1
            log.warning("member %d poll failed, retrying: %s", self.member_id, e)
            time.sleep(min(5.0, 0.2 * 2 ** min(self._failed_polls, 5)))
            self.stats.idle_s += time.monotonic() - poll_started
            return
        self._failed_polls = 0
        polled_at = time.monotonic()
        self.stats.idle_s += polled_at - poll_started  # the rest of its time it holds records
        records: list[Message] = []
        for m in messages:
            err = m.error()
            if err is None:
                records.append(m)
            elif err.code() != KafkaError._PARTITION_EOF:
                self.stats.poll_errors += 1
                log.warning("member %d poll error: %s", self.member_id, err)
        if not records:
            if self.stats.idle_since is None:
                self.stats.idle_since = polled_at
            return
        self.stats.polls += 1
        self.stats.records += len(records)
        self.stats.idle_since = None
        if self.stats.first_record_at is None:
            self.stats.first_record_at = polled_at
        batch = PollBatch(self.member_id, records, self._commands)
        self._current, self._acked_in_current = batch, 0
        self._buffer.coming(self.lane)  # a lingering drain waits for it
        try:
            poll = Poll(batch, poll_rows(records), self.lane)  # the Arrow rows built here, while the sink writes
            while not self._buffer.put(poll, timeout_s=0.2, announced=True):
                if self._abandon.is_set():
                    batch.release_undecided()
                    self._buffer.not_coming(self.lane)
                    return
        except BaseException:
            self._buffer.not_coming(self.lane)
            raise

    def _serve_current(self, client: GroupClient) -> None:
        assert self._current is not None
        if self._abandon.is_set():
            self._current.release_undecided()
        try:
            cmd = self._commands.get(timeout=0.1)
        except queue.Empty:
            return
        self._apply(client, cmd)
        self._drain_commands(client)
        if self._acked_in_current == len(self._current):
            self._commit(client)
            self.stats.acks_s += time.perf_counter() - self._acks_started
            self._current.acks_committed.set()
            self._current = None

    def _drain_commands(self, client: GroupClient) -> None:
        while True:
            try:
                self._apply(client, self._commands.get_nowait())
            except queue.Empty:
                return

    def _apply(self, client: GroupClient, cmd: AckCommand) -> None:
        if cmd.batch is not self._current:
            raise RuntimeError(f"member {self.member_id}: command for a poll it no longer holds")
        if self._acked_in_current == 0:
            self._acks_started = time.perf_counter()
        self.stats.ack_errors += client.acknowledge(cmd)
        self._acked_in_current += len(cmd.indices)
        n = len(cmd.indices)
        if cmd.decision is Decision.ACCEPT:
            self.stats.accepted += n
        elif cmd.decision is Decision.RELEASE:
            self.stats.released += n
        else:
            self.stats.rejected += n

    def _commit(self, client: GroupClient) -> None:
        self.stats.ack_errors += client.commit()
