"""The config: its validated settings, its secrets, and an error as the one line shown."""
