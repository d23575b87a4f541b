"""`--config` and `--set`: how every subcommand that reads a config names it, and the config they give."""

from __future__ import annotations

import argparse

from sharelake.config.loader import load_config
from sharelake.config.settings import SharelakeConfig


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """`--config` and `--set`, for every subcommand that reads a config."""
    parser.add_argument("--config", required=True, help="TOML config file (see conf/local.toml)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override a key")


def job_config(args: argparse.Namespace) -> SharelakeConfig:
    """The config named by `--config`, with the `--set` overrides (ConfigError when it is wrong)."""
    return load_config(args.config, args.set)
