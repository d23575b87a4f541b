"""What the run shows: counters declared once, progress lines and Prometheus, the log set-up."""
