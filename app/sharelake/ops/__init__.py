"""What an operator runs beside the ingest: replay, table maintenance, the group's status and lag, the table summary."""
