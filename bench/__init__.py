"""Sharelake's benchmark harness: `python -m bench.run` (see bench/run.py and `make bench`)."""
