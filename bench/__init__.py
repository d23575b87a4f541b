"""Sharelake's benchmark: `python -m bench <scenario> [args]` (bench/__main__.py lists the scenarios; `make bench`)."""
