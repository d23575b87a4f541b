"""When a micro-batch is tried again, and when the members pause, resume or stop polling.

The sink asks it around each attempt; it is given the formats' probes and three callbacks (`on_fatal`, `on_pause`,
`on_resume`: stop, pause and resume the members' polling). It decides nothing about records: a failed attempt's
records are RELEASEd by the sink before the policy's retry (or the error) follows.

- **Retries.** A failed attempt is retried with exponential backoff and jitter (tenacity) on
  whatever the buffer holds then; after `batch.write_attempts` failures in a row the error
  propagates and the query (and job) fails. A lost writer lease (`LeaseLostError`), a config a batch
  found wrong (`ConfigError`: a key column the registry's schemas lack) and a commit another writer
  replaced (`CommitReplacedError`: the store has no mutual exclusion) are never retried (`NEVER_RETRIED`):
  none passes with time, and each retry would cost the released records a delivery.
- **Stopping the members.** When the job is about to fail (the last attempt failed, the lease is lost,
  the config is wrong) the members stop polling first (`on_fatal`), or they would poll the released
  records again at once, each poll costing a delivery.
- **Pausing for a dependency.** A payload format's dependency that is down (`DependencyUnavailable`:
  the schema registry) is never the record's fault: the members stop polling (`on_pause`), so the
  RELEASEd records are not delivered again meanwhile and spend no delivery attempt; each retry
  first probes the formats (`PayloadFormat.probe`, which raises while it is still down), and only
  then do the members poll again (`on_resume`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from tenacity import (
    Retrying,
    retry_if_exception_type,
    retry_if_not_exception_type,
    stop_after_attempt,
    wait_exponential_jitter,
)

from sharelake.failures.errors import ConfigError, DependencyUnavailable
from sharelake.sink.delta.commit_read_back import CommitReplacedError
from sharelake.sink.delta.writer_lease import LeaseLostError

log = logging.getLogger(__name__)

# failures no retry mends: the attempt's error ends the job at once, the members stopped first
NEVER_RETRIED = (LeaseLostError, ConfigError, CommitReplacedError)


class AttemptPolicy:
    def __init__(
        self,
        attempts: int,
        probes: Sequence[Callable[[], None]],
        on_fatal: Callable[[], None] = lambda: None,
        on_pause: Callable[[], None] = lambda: None,
        on_resume: Callable[[], None] = lambda: None,
    ):
        self.attempts = attempts
        self._probes = probes  # each raises DependencyUnavailable while its dependency is down
        self._on_fatal = on_fatal  # the attempts are exhausted: the members must stop acquiring records
        self._on_pause = on_pause  # a dependency is down: the members stop polling until it is back
        self._on_resume = on_resume
        self._dependency_down = False

    def retrying(self, batch_id: int) -> Retrying:
        """The attempts of one micro-batch (`for attempt in ...: with attempt: ...`)."""
        return Retrying(
            stop=stop_after_attempt(self.attempts),
            wait=wait_exponential_jitter(multiplier=0.5, max=30, jitter=0.5),
            # a lost writer lease does not come back, nor does a config a batch found wrong (a key column the
            # registry's schemas lack), nor a store's mutual exclusion: retrying would only burn deliveries
            retry=retry_if_exception_type(Exception) & retry_if_not_exception_type(NEVER_RETRIED),
            reraise=True,
            before_sleep=lambda state: log.warning(
                "micro-batch %d attempt %d failed, records RELEASEd, retrying: %s",
                batch_id,
                state.attempt_number,
                state.outcome.exception() if state.outcome else None,
            ),
        )

    def is_last(self, attempt_number: int) -> bool:
        return attempt_number >= self.attempts

    def before_attempt(self) -> None:
        """After a dependency went down: raises DependencyUnavailable while it still is, else resumes polling."""
        if not self._dependency_down:
            return
        for probe in self._probes:
            probe()
        self._dependency_down = False
        log.warning("the payload format's dependency answers again: the members poll again")
        self._on_resume()

    def failed(self, error: BaseException, last: bool) -> None:
        """An attempt failed (its records not yet RELEASEd): pause or stop the members as it calls for."""
        if isinstance(error, DependencyUnavailable) and not last:
            self._dependency_down = True  # stop polling first: released records are not delivered again
            self._on_pause()
        # the job fails now: stop the members first, or they poll the released records again at once,
        # each poll costing a delivery
        if last or isinstance(error, NEVER_RETRIED):
            self._on_fatal()
