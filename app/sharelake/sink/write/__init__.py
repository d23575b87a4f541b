"""What is written: the destinations, one writer per destination, and the write modes (append, upsert) behind one
seam.
"""
