"""What every scenario of `python -m bench` shares: the logging set-up, the run's time stamp, the
command line's list arguments, the places (work and results folders), the settings built from the
command line, the work folder's clean-up and a broker holding a backlog.

Each scenario is a module with `HELP`, `configure(parser)`, `settings(args)` and `run(args)`;
`bench/__main__.py` lists them and starts the logging before the chosen one runs.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from devkit.paths import CACHE_DIR, PROJECT_ROOT
from devkit.workload import produce_backlog, record_key
from sharelake.testing.kafka_broker import EmbeddedKafka

RESULTS_DIR = PROJECT_ROOT / "bench" / "results"
WORK_ROOT = CACHE_DIR / "bench"  # broker data, Delta tables, job logs of each run


def start_logging() -> None:
    """INFO on stderr, each line with its time, level and logger; py4j's chatter left out."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)


class Stamp(NamedTuple):
    """The moment a scenario started, as its file names (`2026-11-27-103547`), its report
    (`2026-11-27 10:35:47 CET`) and its titles (`2026-11-27 10:35`) write it."""

    file: str
    text: str
    minute: str


def stamp() -> Stamp:
    at = time.localtime()
    return Stamp(*(time.strftime(f, at) for f in ("%Y-%m-%d-%H%M%S", "%Y-%m-%d %H:%M:%S %Z", "%Y-%m-%d %H:%M")))


def ints(text: str) -> tuple[int, ...]:
    """A comma-separated list of numbers (`--partitions 1,4,16`)."""
    return tuple(int(x) for x in text.split(",") if x.strip())


def names(text: str) -> tuple[str, ...]:
    """A comma-separated list of names (`--contenders sharelake,perf-tool`)."""
    return tuple(x.strip() for x in text.split(",") if x.strip())


def add_places(parser: argparse.ArgumentParser) -> None:
    """`--work-dir`, `--results-dir` and `--keep-work`, which every scenario with a report takes."""
    parser.add_argument("--work-dir", type=Path, default=WORK_ROOT, help=f"broker data, tables, logs ({WORK_ROOT})")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help=f"the report's folder ({RESULTS_DIR})")
    parser.add_argument("--keep-work", action="store_true", help="keep broker data, tables and logs")


def add_settings(parser: argparse.ArgumentParser, default: Any, helps: dict[str, str]) -> None:
    """`--smoke`, and an option per field of `default` (a dataclass) that `helps` names: `--the-field`, of
    the default's type (a tuple: a comma-separated list), its help `helps[field]` and the default. An
    option not given is None, so that `settings_from` keeps the default (or `--smoke`'s)."""
    parser.add_argument("--smoke", action="store_true", help="tiny sizes that only check the harness works")
    for name, text in helps.items():
        value = getattr(default, name)
        kind: Callable[[str], Any] = type(value)
        shown = f"{value:,}" if isinstance(value, int) else f"{value:g}" if isinstance(value, float) else repr(value)
        if isinstance(value, tuple):
            kind, shown = ints if value and isinstance(value[0], int) else names, ",".join(map(str, value))
        parser.add_argument(f"--{name.replace('_', '-')}", type=kind, help=f"{text} (default {shown})")


S = TypeVar("S")


def settings_from(args: argparse.Namespace, default: S, smoke: dict[str, Any] | None = None) -> S:
    """`default` (a frozen dataclass) with `smoke`'s sizes under `--smoke`, and every field the command
    line gave (not None) replaced by it; a list given (a repeated option) becomes a tuple."""
    s: Any = default
    if smoke and getattr(args, "smoke", False):
        s = replace(s, **smoke)
    given = {f.name: getattr(args, f.name) for f in fields(s) if getattr(args, f.name, None) is not None}
    out: S = replace(s, **{k: tuple(v) if isinstance(v, list) else v for k, v in given.items()})
    return out


@contextmanager
def work_folder(root: Path, name: str, keep: bool) -> Iterator[Path]:
    """`root / name`, the scenario's broker data, tables and logs: deleted at the end unless `keep`."""
    work = root / name
    try:
        yield work
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


@contextmanager
def backlog(
    work: Path, topic: str, partitions: int, records: int, key_of: Callable[[int], bytes] = record_key
) -> Iterator[EmbeddedKafka]:
    """An embedded broker whose `topic` holds the workload's `records` (`devkit.workload`), produced at once."""
    with EmbeddedKafka(work / "broker", heap="1g") as kafka:
        kafka.create_topic(topic, partitions=partitions)
        produce_backlog(kafka.bootstrap, topic, records, key_of=key_of)
        yield kafka
