"""Start-up against a dependency that is down: wait for it, bounded, instead of failing as a bad config.

A start-up check of a dependency (the broker, the schema registry) passes, raises `ConfigError` for a
wrong setting (credentials refused, an unknown host: exit 2 at once, one line), or raises
`DependencyUnavailable` for an outage (no answer, a timeout, a refused connection, a 5xx): a
dependency not up yet, or restarting, which a supervisor or a scheduler would not retry after an
exit 2. An outage is tried again with backoff for up to `run.dependency_wait_s`, one log line per
try naming the dependency and the cause; one that outlasts the wait raises `DependencyOutage`
(exit 3, one line).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_delay, wait_exponential

from sharelake.failures.errors import DependencyOutage, DependencyUnavailable

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_BACKOFF_S = 10.0


def waiting_out_outages(check: Callable[[], T], wait_s: float) -> T:
    """`check()`'s result, trying again while it raises `DependencyUnavailable`, for up to `wait_s`
    seconds; then `DependencyOutage` with the last cause. Any other error propagates at once."""

    def note(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        left = max(0.0, wait_s - state.seconds_since_start) if state.seconds_since_start is not None else wait_s
        log.warning("waiting for a dependency: %s; trying again (%.0f s of run.dependency_wait_s left)", error, left)

    retrying = Retrying(
        retry=retry_if_exception_type(DependencyUnavailable),
        stop=stop_after_delay(wait_s),
        wait=wait_exponential(multiplier=1, min=1, max=MAX_BACKOFF_S),
        before_sleep=note,
        reraise=True,
    )
    try:
        return retrying(check)
    except DependencyUnavailable as e:
        raise DependencyOutage(f"{e}; still down after run.dependency_wait_s = {wait_s:g}s") from None
