"""Where the records that cannot land go before they are REJECTed: the seam, the Delta dead-letter table and its
rows.
"""
