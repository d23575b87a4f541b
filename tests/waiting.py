"""Waiting on a condition in a test, never on a fixed sleep: `wait_for`.

A scenario test provokes its race or fault by waiting until what it needs has happened (a job held
at a fault point, another job's commit in the table), not for a time it happened within on one
machine. When the condition never holds, the test fails saying which scenario was not provoked,
rather than going on and asserting a side effect of a timing that did not occur.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


def wait_for(
    condition: Callable[[], T],
    timeout_s: float,
    failure: str | Callable[[], str],
    *,
    interval_s: float = 0.5,
    give_up: Callable[[], object] | None = None,
) -> T:
    """`condition()`'s first truthy value, polled every `interval_s`.

    Fails the test with `failure` (a callable is called then, to describe the state at that moment)
    once `timeout_s` passed, or as soon as `give_up()` is truthy (say the process it waits on exited).
    The condition gets one more look when `give_up()` turns truthy: what it waits on may have
    happened just before the process exited.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        gave_up = give_up is not None and bool(give_up())
        if gave_up and (value := condition()):
            return value
        if gave_up or time.monotonic() >= deadline:
            pytest.fail(failure() if callable(failure) else failure)
        time.sleep(interval_s)
