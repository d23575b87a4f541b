"""The `sharelake` command: one entry point, a subcommand per task (ingest, replay-dead-letters,
maintain, check, status, version).

`main` is the one entry point: the package's `sharelake` console script (`exit_with_code`; `pip install
sharelake-*.whl` gives `sharelake`) and the thin spark-submit entry points in `jobs/` (`jobs/main.py ingest
...`) both run it, so a subcommand runs the same from a terminal, a scheduler or spark-submit on YARN and
Kubernetes. Each subcommand is one module of `sharelake.commands` (its arguments and its `run`), imported only when
chosen (`sharelake version` starts no JVM). A bad config (any `ConfigError`) ends a subcommand with one line on
stderr, `sharelake: <the key and the fix>`, and exit code 2, as does a table another live job writes
(`TableInUseError`, S3's writer lease). A dependency still down when the start's wait for it
ran out (`DependencyOutage`) ends it with one line and exit code 3. Any other failure prints its traceback, then
one line `sharelake: <subcommand> failed: <cause>`, and exit code 1. `exit_with_code` ends the process with that
code, which a caller running the entry point as a function (a Databricks wheel task) would otherwise drop.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence
from importlib import import_module
from typing import Protocol

from sharelake.failures.errors import ConfigError, DependencyOutage, TableInUseError, one_line
from sharelake.observe import console

CONFIG_ERROR_EXIT = 2
DEPENDENCY_OUTAGE_EXIT = 3  # a dependency still down after run.dependency_wait_s: worth a retry later


class Command(Protocol):
    """What a module of `sharelake.commands` holds."""

    HELP: str

    def configure(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


# subcommand -> its module under sharelake.commands (imported when chosen: `sharelake version` starts no JVM)
COMMANDS = {
    "ingest": "ingest",
    "replay-dead-letters": "replay",
    "maintain": "maintain",
    "check": "check",
    "status": "status",
    "version": "version",
}


def command(name: str) -> Command:
    module: Command = import_module(f"sharelake.commands.{COMMANDS[name]}")
    return module


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="sharelake", description=__doc__.split("\n\n")[0].replace("\n", " "))
    subs = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        cmd = command(name)
        sub = subs.add_parser(name, help=cmd.HELP, description=cmd.HELP)
        cmd.configure(sub)
    return top


def config_failure(e: ConfigError | TableInUseError) -> int:
    """Report a ConfigError (or a table in use) as the one line the user reads (the last line); the exit
    code to return."""
    console.print_cause(str(e))
    return CONFIG_ERROR_EXIT


def start_logging() -> None:
    console.start_logging()  # INFO on stderr, repeated librdkafka lines folded


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    start_logging()
    try:
        return command(args.command).run(args)
    except (ConfigError, TableInUseError) as e:  # exit 2: a setting to fix, or a second job to stop
        return config_failure(e)
    except DependencyOutage as e:
        console.print_cause(str(e))
        return DEPENDENCY_OUTAGE_EXIT
    except Exception as e:  # noqa: BLE001 - the trace for a bug report, then the one line a user reads
        traceback.print_exc()
        console.print_cause(f"{args.command} failed: {one_line(e)}")
        return 1


def exit_with_code(argv: Sequence[str] | None = None) -> None:
    """`main`, ending the process with its exit code: the `sharelake` console script. A Databricks
    wheel task calls its entry point as a function and would drop a returned code (a failed run
    would read as a success); SystemExit carries it."""
    sys.exit(main(argv))


if __name__ == "__main__":
    exit_with_code()
