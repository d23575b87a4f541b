"""The config: its models (settings), a file and its overrides read (loader), each topic's table (routes)."""
