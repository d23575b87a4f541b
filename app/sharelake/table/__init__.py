"""What a table is, as values: where it is, its layout, the columns a write adds to each row, and the offsets
its commits claim."""
