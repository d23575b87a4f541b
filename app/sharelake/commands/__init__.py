"""The subcommands of `sharelake` (`sharelake.cli`): one module each, with `HELP`, `configure(parser)` and
`run(args)`."""
