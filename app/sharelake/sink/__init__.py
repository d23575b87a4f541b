"""Where the records land: one micro-batch (batch), what a table already holds (dedup), Delta's plumbing (delta),
what is written (write) and where bad records go (dead_letter).
"""
