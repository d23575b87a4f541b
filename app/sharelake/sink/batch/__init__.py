"""One micro-batch: drain the buffer, plan each record, land each table (a writer per destination), decide;
its retries, budget, counters and the start's warm-up.
"""
