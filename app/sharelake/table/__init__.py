"""What a table is, as values: where it is, its layout, and the columns a write adds to each row."""
