"""The subcommands of `sharelake` (`app.cli`): one module each, with `HELP`, `configure(parser)` and `run(args)`."""
