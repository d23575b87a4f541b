"""Unit tests of the LaneRoster: when a lane of a micro-batch may end its rounds (no Spark, no broker)."""

from __future__ import annotations

from sharelake.sink.batch.delta_sink import LaneRoster


def test_one_lane_ends_as_soon_as_its_drain_finds_nothing() -> None:
    assert LaneRoster([0]).may_end(0)


def test_a_lane_that_found_nothing_waits_while_another_lane_still_lands_rounds() -> None:
    roster = LaneRoster([0, 1])
    roster.landed(1)  # the slow lane is landing a round
    assert not roster.may_end(0)  # the fast lane found nothing for now: it waits for its next polls
    roster.landed(0)
    assert not roster.may_end(1)  # the fast lane landed again meanwhile
    assert roster.may_end(0)  # both found nothing: the fast lane may end ...
    roster.ended(0)
    assert roster.may_end(1)  # ... and so may the slow one


def test_a_lane_that_ended_holds_no_other_lane() -> None:
    roster = LaneRoster([0, 1, 2])
    roster.ended(2)  # failed or out of time
    roster.landed(1)
    assert not roster.may_end(0)
    assert roster.may_end(1)
