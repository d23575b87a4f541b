"""The pool of group members in the driver: M threads, each owning one Kafka client of the group type.

More members keep more polls in flight: while the records of one member are being written by the running
micro-batch, the others keep polling and fill the RecordBuffer for the next one. The members may join the group
(`join_group`) before any of them polls (`start`). The pool also answers "is the backlog drained?" for the
until-drained run mode, pauses and resumes polling while a dependency of the sink is down (no member leaves the
group), and runs the graceful stop (stop polling, let the sink decide, release the rest, commit, close).

The members are split into lanes, one per group of topics the sink lands on their own (`lanes`: a routed job's
tables, each with its topics): a member subscribes to its lane's topics only and puts its polls in that lane of the
buffer, so a poll never spans two lanes and a slow table's records never hold back another's. Every lane keeps at
least one member. The pool is elastic: `resize(n)` starts new members or retires the newest ones while the stream
runs, never beyond the group type's cap (a consumer group's: its partition count). A share group needs no
stop-the-world rebalance for either: a new member joins and polls, and a retiring member stops polling, lets the
sink decide its last poll, commits and closes; the others never pause. A consumer group rebalances instead
(`sharelake.consume.classic.consumer_group`). The pool's counters are its members' (`member_stats`, retired members'
included) and its gauges (`PoolGauges`).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from sharelake.bridge.record_buffer import RecordBuffer
from sharelake.config.settings import KafkaConfig, PumpConfig
from sharelake.consume.group_type import NO_POSITIONS, GroupType, TablePositions
from sharelake.consume.member import Member, MemberStats
from sharelake.observe.counters import gauge, summed

log = logging.getLogger(__name__)

IDLE_CLOSE_S = 5.0  # how long a stop waits for the members without records to close (leave the group)


@dataclass
class PoolGauges:
    """The pool's and buffer's state now (see sharelake.observe.counters)."""

    members_active: int = gauge("group members polling")
    buffer_records: int = gauge("records waiting in the buffer")
    buffer_capacity: int = gauge("the buffer's bound (pump.buffer_max_records)")


class MemberPool:
    def __init__(
        self,
        kafka: KafkaConfig,
        pump: PumpConfig,
        buffer: RecordBuffer,
        group: GroupType,
        max_members: int | None = None,
        positions: TablePositions = NO_POSITIONS,
        lanes: list[list[str]] | None = None,
    ):
        """`positions`: where the tables are (`group_type.table_positions`), read before the pool
        is made; each member's client gets them (a consumer group starts its partitions there).
        `lanes`: the topics of each lane (default: one lane of every subscribed topic)."""
        self._lanes = lanes or [kafka.subscribed]
        self.buffer = buffer
        self._kafka = kafka
        self._pump = pump
        self._group = group
        self._positions = positions
        self._lock = threading.Lock()
        self._next_id = 0
        self.members: list[Member] = []  # active: polling
        self.retired: list[Member] = []  # stopped polling (by a shrink); counted in totals
        self.cap = max_members  # the group type's bound (a consumer group: its partitions), None: none
        for _ in range(max(self.bounded(pump.members), len(self._lanes))):
            self.members.append(self._new_member())
        self._started = False
        self._polling = False
        self._paused = False  # by pause_polling, until resume_polling

    def _new_member(self) -> Member:
        """A member of the lane with the fewest members (the first, on a tie)."""
        i = self._next_id
        self._next_id += 1
        lane = min(range(len(self._lanes)), key=lambda k: sum(m.lane == k for m in self.members))
        return Member(
            i,
            lambda: self._group.client(self._kafka, self._pump, i, self._positions),
            self._lanes[lane],
            self.buffer,
            self._pump.poll_timeout_ms / 1000,
            lane,
        )

    def lane_members(self, lane: int) -> int:
        """The members of `lane` polling now."""
        with self._lock:
            return sum(m.lane == lane for m in self.members)

    def join_group(self) -> None:
        """Start the members: they subscribe and join the group, and acquire nothing yet."""
        with self._lock:
            self._started = True
            for m in self.members:
                m.start()

    def start(self) -> None:
        """Let every member poll (joining the group first if `join_group` was not called)."""
        with self._lock:
            for m in self.members:
                if not self._started:
                    m.start()
                m.start_polling()
            self._started = self._polling = True

    @property
    def size(self) -> int:
        return len(self.members)

    def bounded(self, n: int) -> int:
        """`n` members, at most the group type's cap."""
        return n if self.cap is None else max(1, min(n, self.cap))

    def resize(self, n: int) -> None:
        """Grow to / shrink to `n` active members (at most the cap), while the stream runs."""
        n = self.bounded(n)
        with self._lock:
            while len(self.members) < n:
                m = self._new_member()
                self.members.append(m)
                if self._started:
                    m.start()
                if self._polling:
                    m.start_polling()
            while len(self.members) > max(n, 1) and (retiring := self._retiring()) is not None:
                self.members.remove(retiring)
                retiring.stop_polling()  # finishes its in-flight poll (the sink decides it), commits, closes
                self.retired.append(retiring)
        log.info("member pool resized to %d", len(self.members))

    def _retiring(self) -> Member | None:
        """The newest member (its consumer has the least state to lose) whose lane keeps another."""
        for m in reversed(self.members):
            if sum(o.lane == m.lane for o in self.members) > 1:
                return m
        return None

    def _all(self) -> list[Member]:
        with self._lock:
            return [*self.members, *self.retired]

    def failures(self) -> list[BaseException]:
        return [m.failure for m in self._all() if m.failure is not None]

    def member_stats(self) -> list[MemberStats]:
        """Every member's counters, retired members' included (sharelake.observe.counters sums them)."""
        return [m.stats for m in self._all()]

    def totals(self) -> MemberStats:
        """The members' counters summed, and the earliest first record."""
        stats = self.member_stats()
        total = summed(stats, MemberStats())
        firsts = [s.first_record_at for s in stats if s.first_record_at is not None]
        total.first_record_at = min(firsts) if firsts else None
        return total

    def gauges(self) -> PoolGauges:
        return PoolGauges(self.size, self.buffer.records, self.buffer.max_records)

    def idle_seconds(self) -> dict[int, float]:
        """Each active member's seconds spent waiting in poll (not holding records), since it started."""
        with self._lock:
            return {m.member_id: m.stats.idle_s for m in self.members}

    def drained(self, idle_timeout_s: float, empty_timeout_s: float) -> bool:
        """The until-drained test: every member polled and got nothing for long enough, and
        nothing polled is still undecided.

        Long enough is `idle_timeout_s` once any record arrived, `empty_timeout_s` while none has
        (joining the group takes seconds). A member waiting for its records' decisions cannot
        poll, so it never counts as idle (a slow Delta commit is not an empty topic).
        """
        if self.in_flight():
            return False
        if self.paused:  # waiting for the sink's dependency: not drained, just held back
            return False
        needed = idle_timeout_s if self.totals().records else empty_timeout_s
        now = time.monotonic()
        with self._lock:
            idle = [m.stats.idle_since for m in self.members]
        return all(since is not None and now - since >= needed for since in idle)

    def in_flight(self) -> bool:
        return any(m.holds_records for m in self._all()) or self.buffer.records > 0

    def pause_polling(self) -> None:
        """No member polls until `resume_polling` (the sink's dependency is down); none leaves the group."""
        with self._lock:
            self._polling, self._paused = False, True
            for m in self.members:
                m.pause_polling()
        log.warning("members paused: no poll until the sink's dependency answers again")

    def resume_polling(self) -> None:
        with self._lock:
            self._polling, self._paused = True, False
            for m in self.members:
                m.start_polling()

    @property
    def paused(self) -> bool:
        return self._paused

    def stop_polling(self) -> None:
        """No member polls again; the members that hold no records close now: the job is about to stop.

        Returns once those have closed (bounded): an idle member's poll leaves its fetch waiting at
        the broker after poll() returns, and records RELEASEd meanwhile would be acquired by that
        fetch for a consumer that never polls again, costing them a delivery attempt when it
        closes. The members holding records finish deciding them (the sink, or `stop`) and close.
        """
        members = self._all()
        for m in members:
            m.stop_polling()
        deadline = time.monotonic() + self._pump.poll_timeout_ms / 1000 + IDLE_CLOSE_S
        while any(m.is_alive() and not m.holds_records for m in members) and time.monotonic() < deadline:
            time.sleep(0.01)

    def stop(self, timeout_s: float) -> None:
        """Graceful stop within `timeout_s`: stop polling, wait for decisions, release the rest.

        Polls still waiting in the buffer never reach Delta now, so they are RELEASEd (a member
        may still be putting its last poll, hence the loop); polls the running micro-batch took
        are decided by the sink. Past the bound, members RELEASE whatever is still undecided.
        """
        members = self._all()
        self.stop_polling()  # the idle members close before any buffered poll is RELEASEd
        deadline = time.monotonic() + timeout_s
        while any(m.is_alive() for m in members) and time.monotonic() < deadline:
            for poll in self.buffer.take_all():
                poll.batch.release_undecided()
            time.sleep(0.05)
        for m in members:
            if m.is_alive():
                log.warning("member %d still holds undecided records at the stop bound: releasing", m.member_id)
                m.abandon()
        for m in members:
            if m.ident is not None:
                m.join(30)
