"""spark-submit entry points of the benchmark (run in their own driver, not imported by the harness)."""
