"""The acknowledgement protocol a share member runs for its poll: acknowledge each record, then commit.

Called by `app.consume.share_member` in the member's own thread (the consumer is not thread-safe
and only that thread touches it). In explicit mode every record of a poll must be acknowledged
before the next poll: `acknowledge` applies one AckCommand (each of its records with the command's
ACCEPT, RELEASE or REJECT), `commit` sends the poll's acknowledgements with `commit_sync` once all
are applied. Both return what the broker refused, for the member's counters.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer

from app.acknowledge.lifecycle import AckCommand
from app.acknowledge.proof import Decision

log = logging.getLogger(__name__)

ACK_TYPES: Mapping[Decision, AcknowledgeType] = {
    Decision.ACCEPT: AcknowledgeType.ACCEPT,
    Decision.RELEASE: AcknowledgeType.RELEASE,
    Decision.REJECT: AcknowledgeType.REJECT,
}


def acknowledge(consumer: ShareConsumer, cmd: AckCommand, member_id: int) -> int:
    """Acknowledge each record of `cmd` with its decision; how many acknowledgements the client refused."""
    ack_type = ACK_TYPES[cmd.decision]
    refused = 0
    for i in cmd.indices:
        try:
            consumer.acknowledge(cmd.batch.records[i], ack_type)
        except KafkaException as e:
            refused += 1
            log.warning("member %d acknowledge failed: %s", member_id, e)
    return refused


def commit(consumer: ShareConsumer, member_id: int) -> int:
    """commit_sync the acknowledged records; how many partitions (or the call) the broker refused."""
    try:
        results = consumer.commit_sync()
    except KafkaException as e:
        log.warning("member %d commit failed: %s", member_id, e)
        return 1
    refused = 0
    for tp, err in results.items():
        if err is not None:
            refused += 1
            log.warning("member %d: acknowledgements on %s/%s failed: %s", member_id, tp.topic, tp.partition, err)
    return refused
