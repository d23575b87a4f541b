"""What is written: the destinations and the write modes (append, upsert) behind one seam; the writer of each
destination is `sharelake.sink.batch.table_writer`'s.
"""
