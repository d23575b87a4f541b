"""Turns the decisions a micro-batch made about rows into one acknowledge command per poll.

Called by the Delta sink (`app.sink.delta_sink`) once a commit holding records is durable (ACCEPT,
REJECT) or when records cannot be decided (RELEASE). Rows are numbered over the batch's polls in
poll order (`poll_of`, `index_in_poll`, as `app.sink.batch_plan` numbers them); the chosen rows of
each poll become one `PollBatch.accept` / `reject` / `release`, which queues one `AckCommand` for
the member that owns the poll.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from app.acknowledge.lifecycle import CommitProof, Decision, PollBatch

Indices = npt.NDArray[np.intp]


def decide(
    polls: Sequence[PollBatch],
    poll_of: Indices,
    index_in_poll: Indices,
    chosen: npt.NDArray[np.bool_],
    decision: Decision,
    proof: CommitProof | None = None,
) -> None:
    """Decide the `chosen` rows: ACCEPT and REJECT need the proof of the commit that holds them."""
    rows = np.flatnonzero(chosen)
    if not rows.size:
        return
    if decision is not Decision.RELEASE and proof is None:
        raise RuntimeError(f"{decision.name} without a commit proof")
    for chunk in np.split(rows, np.flatnonzero(np.diff(poll_of[rows])) + 1):  # rows are in poll order
        poll = polls[int(poll_of[chunk[0]])]
        indices = index_in_poll[chunk]
        if decision is Decision.RELEASE:
            poll.release(indices)
        elif decision is Decision.ACCEPT:
            assert proof is not None
            poll.accept(proof, indices)
        else:
            assert proof is not None
            poll.reject(proof, indices)
