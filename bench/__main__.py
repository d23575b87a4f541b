"""`python -m bench <scenario> [args]`: the benchmark's one entry point, a subcommand per scenario.

Each scenario is one module of `bench` with `HELP`, `configure(parser)` (its arguments),
`settings(args)` (what it runs with, from them) and `run(args)` (its exit code); the module is
imported when its scenario is chosen (`python -m bench --help` imports them all for their HELP).
The logging is set up here, once, before the scenario runs (`bench.harness.start_logging`). Every
scenario writes its report through `bench.figures.save_report`. The Spark jobs in
`bench/spark_jobs/` are spark-submit scripts the scenarios start, not scenarios.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib import import_module
from typing import Any, Protocol

from bench.harness import start_logging


class Scenario(Protocol):
    """What a scenario module holds."""

    HELP: str

    def configure(self, parser: argparse.ArgumentParser) -> None: ...

    def settings(self, args: argparse.Namespace) -> Any: ...

    def run(self, args: argparse.Namespace) -> int: ...


# scenario -> its module under bench
SCENARIOS = {
    "run": "run",
    "storage": "storage",
    "formats": "formats",
    "format-decode": "format_decode",
    "sustained": "sustained",
    "poison-storm": "poison_storm",
    "bad-batches": "bad_batches",
    "failover": "failover",
    "soak": "soak",
    "several-jobs": "several_jobs",
    "scale-out": "scale_out",
    "layouts": "layouts",
    "upserts": "upserts",
    "cycle": "cycle",
}


def scenario(name: str) -> Scenario:
    module: Scenario = import_module(f"bench.{SCENARIOS[name]}")
    return module


def parser(name: str) -> argparse.ArgumentParser:
    """The scenario's own parser: `python -m bench <name> --help` prints it."""
    chosen = scenario(name)
    p = argparse.ArgumentParser(prog=f"python -m bench {name}", description=chosen.HELP)
    chosen.configure(p)
    return p


def overview() -> argparse.ArgumentParser:
    """The parser of `python -m bench --help`: the scenarios and what each measures."""
    top = argparse.ArgumentParser(prog="python -m bench", description=(__doc__ or "").split("\n\n")[0])
    subs = top.add_subparsers(dest="scenario", required=True, metavar="SCENARIO")
    for name in SCENARIOS:
        subs.add_parser(name, help=scenario(name).HELP.replace("%", "%%"), add_help=False)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in SCENARIOS:
        overview().parse_args(argv)  # prints the help, or the error naming the scenarios; exits
        return 2
    args = parser(argv[0]).parse_args(argv[1:])
    start_logging()
    return scenario(argv[0]).run(args)


if __name__ == "__main__":
    sys.exit(main())
