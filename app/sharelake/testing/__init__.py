"""Sharelake's testing kit (`pip install sharelake[testing]`): test your own pipeline in local mode.

The pytest plugin (`sharelake.testing.plugin`, registered by the package) gives a real Kafka broker with
share groups, a schema registry and a local SparkSession with Delta, each started once per session.
`run_until_drained` runs your config in that session and returns what landed, what was
dead-lettered and the run's counters; `read_table` and `without_bookkeeping` give chispa-ready
frames; `produce_records` sends records and returns where each landed. The manual's chapter:
docs/testing.md.

pytest imports this package with its plugin in every run of an environment with Sharelake
installed, so the names below are imported on first use (`from sharelake.testing import ...`), not here:
a run that uses none of them loads no pyspark.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sharelake.testing.drained_run import DrainedRun, run_until_drained
    from sharelake.testing.produce import Produced, produce_records
    from sharelake.testing.tables import read_table, without_bookkeeping

# each name of the kit -> the module that holds it
_HOME = {
    "DrainedRun": "sharelake.testing.drained_run",
    "run_until_drained": "sharelake.testing.drained_run",
    "Produced": "sharelake.testing.produce",
    "produce_records": "sharelake.testing.produce",
    "read_table": "sharelake.testing.tables",
    "without_bookkeeping": "sharelake.testing.tables",
}

__all__ = ["DrainedRun", "Produced", "produce_records", "read_table", "run_until_drained", "without_bookkeeping"]


def __getattr__(name: str) -> Any:
    """A kit name, imported from its module on first use (PEP 562)."""
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_HOME[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOME])
