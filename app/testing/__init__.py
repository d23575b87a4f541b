"""Sharelake's testing kit (`pip install sharelake[testing]`): test your own pipeline in local mode.

The pytest plugin (`app.testing.plugin`, registered by the package) gives a real Kafka broker with
share groups, a schema registry and a local SparkSession with Delta, each started once per session.
`run_until_drained` runs your config in that session and returns what landed, what was
dead-lettered and the run's counters; `read_table` and `without_bookkeeping` give chispa-ready
frames; `produce_records` sends records and returns where each landed. The manual's chapter:
docs/testing.md.
"""

from app.testing.drained_run import DrainedRun, run_until_drained
from app.testing.produce import Produced, produce_records
from app.testing.tables import read_table, without_bookkeeping

__all__ = ["DrainedRun", "Produced", "produce_records", "read_table", "run_until_drained", "without_bookkeeping"]
