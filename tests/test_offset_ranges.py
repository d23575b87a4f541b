"""Unit tests of the offset interval sets used for commit metadata and dedup."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable

import pytest

from sharelake.table.offset_ranges import OffsetRanges


def ranges_of(offsets: Iterable[int]) -> OffsetRanges:
    """The ranges of any offsets (a test's literal list or set)."""
    return OffsetRanges.of_array(list(offsets))


def test_of_compacts_consecutive_offsets() -> None:
    r = ranges_of([5, 1, 2, 3, 9, 10, 3])
    assert list(r) == [(1, 3), (5, 5), (9, 10)]
    assert r.count() == 6
    assert len(r) == 3


def test_adjacent_and_overlapping_ranges_merge() -> None:
    r = OffsetRanges([(10, 20), (30, 40)])
    r.add_range(21, 29)  # bridges the gap exactly
    assert list(r) == [(10, 40)]
    r.add_range(0, 9)
    r.add_range(41, 41)
    assert list(r) == [(0, 41)]
    r.add_range(5, 100)
    assert list(r) == [(0, 100)]


def test_membership() -> None:
    r = OffsetRanges([(0, 4), (10, 10), (20, 29)])
    inside = [0, 4, 10, 20, 29]
    outside = [-1, 5, 9, 11, 19, 30]
    assert all(o in r for o in inside)
    assert not any(o in r for o in outside)


def test_empty_and_bad_ranges() -> None:
    assert list(ranges_of([])) == []
    assert 0 not in OffsetRanges()
    with pytest.raises(ValueError, match="ends before it starts"):
        OffsetRanges().add_range(5, 4)


def test_matches_a_plain_set_on_random_inserts() -> None:
    rng = random.Random(7)
    truth: set[int] = set()
    r = OffsetRanges()
    for _ in range(2000):
        s = rng.randrange(0, 3000)
        e = s + rng.randrange(0, 8)
        r.add_range(s, e)
        truth.update(range(s, e + 1))
    assert r.count() == len(truth)
    assert all((o in r) == (o in truth) for o in range(-5, 3100))
    ranges = list(r)
    assert all(a[1] + 1 < b[0] for a, b in itertools.pairwise(ranges))  # disjoint, not adjacent
    assert OffsetRanges(ranges) == r


def test_intersection_matches_plain_sets() -> None:
    assert list(OffsetRanges([(0, 9), (20, 29)]).intersection(OffsetRanges([(5, 24)]))) == [(5, 9), (20, 24)]
    assert list(OffsetRanges([(0, 9)]).intersection(OffsetRanges([(10, 19)]))) == []
    rng = random.Random(11)
    for _ in range(50):
        a, b = (set(rng.sample(range(200), rng.randrange(0, 120))) for _ in range(2))
        both = ranges_of(a).intersection(ranges_of(b))
        assert both == ranges_of(a & b)
