"""Test-only proofs: a CommitProof without a Delta commit behind it, for the state machine's unit tests.

Production code gets proofs from `sharelake.sink.delta.writer.DeltaWriter` only; a test that needs one
without a real append takes it from here, so the name says what it is.
"""

from __future__ import annotations

from sharelake.acknowledge.proof import CommitProof


def proof_for_tests(table: str, version: int) -> CommitProof:
    return CommitProof._mint(table, version)
