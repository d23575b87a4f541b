"""The batch budget: how many records an upsert's batch may take to stay within half the record lock."""

from __future__ import annotations

from sharelake.acknowledge.window import DecisionWindow
from sharelake.sink.batch.budget import BatchBudget


def test_cheap_batches_take_all_they_may() -> None:
    budget = BatchBudget(DecisionWindow.record_lock(30.0))
    assert budget.records(10_000) == 10_000  # nothing measured yet
    budget.observe(2000, 0.4)
    budget.observe(4000, 0.6)
    assert budget.records(10_000) == 10_000


def test_a_batch_that_would_outlast_half_the_lock_is_split() -> None:
    budget = BatchBudget(DecisionWindow.record_lock(10.0))  # its writes may take 5 s
    budget.observe(1000, 1.5)
    budget.observe(2000, 2.5)  # 0.5 s a batch + 1 ms a record
    assert budget.records(10_000) == 4500
    budget.observe(3000, 3.5)
    assert budget.records(4000) == 4000  # within the budget: the ceiling


def test_when_a_batch_alone_outlasts_it_each_batch_is_one_poll() -> None:
    budget = BatchBudget(DecisionWindow.record_lock(2.0))
    budget.observe(100, 1.6)
    budget.observe(200, 1.7)
    assert budget.records(5000) == 1  # the buffer's drain still takes one whole poll
