"""What a table already holds, by (topic, partition, offset): the dedup table, its cache, the commit log it
reads, offsets as values.
"""
