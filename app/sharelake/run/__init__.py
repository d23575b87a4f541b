"""One run and what starts it: the staged ingest run, start-up checks, graceful stop, Spark settings, fault points."""
