"""Delta's plumbing: the checked append transaction and its parts, the log's upkeep, catalog entries, the S3
writer lease, the local-disk commit lock.
"""
