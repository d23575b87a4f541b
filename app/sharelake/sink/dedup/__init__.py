"""What a table already holds, by (topic, partition, offset): the dedup table, its cache, the commit log it
reads (the offsets themselves are `sharelake.table.offset_ranges`).
"""
