"""How long a polled record may wait for its decision before the group takes it back, as a value."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DecisionWindow:
    """A share group's record lock, or a consumer group's `max.poll.interval.ms` (its member polls again
    only once the last poll is decided): what a batch's cycle is measured against, its name in the
    warnings that say so, and the setting that widens it."""

    seconds: float
    name: str  # "record lock", "max.poll.interval.ms"
    setting: str  # the key a user raises to widen it

    @classmethod
    def record_lock(cls, seconds: float) -> DecisionWindow:
        return cls(seconds, "record lock", "kafka.record_lock_duration_ms")

    @classmethod
    def poll_interval(cls, seconds: float) -> DecisionWindow:
        return cls(seconds, "max.poll.interval.ms", 'kafka.client."max.poll.interval.ms"')

    def __str__(self) -> str:
        return f"{self.seconds:.1f}s {self.name}"
