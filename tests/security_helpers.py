"""A secured broker's side of a test (`devkit.security`): the job principal's ACLs, the job's settings.

Shared by tests/test_security.py (a secured broker on loopback) and tests/test_network_tls.py (one
on a host of a `devkit.network`). The job reads its password from `PASSWORD_ENV` (`env:NAME`),
never from its command line.
"""

from __future__ import annotations

from pathlib import Path

from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

from sharelake.testing.kafka_broker import EmbeddedKafka

PASSWORD_ENV = "SHARELAKE_TEST_SASL_PASSWORD"


def grant(kafka: EmbeddedKafka, user: str, topic: str, group: str, *, group_acls: bool = True) -> None:
    """The job's ACLs (docs/security.md): READ on the topic; READ, DESCRIBE_CONFIGS, ALTER_CONFIGS on the group."""

    def allow(kind: ResourceType, name: str, op: AclOperation) -> AclBinding:
        return AclBinding(
            kind, name, ResourcePatternType.LITERAL, f"User:{user}", "*", op, AclPermissionType.ALLOW
        )  # fmt: skip

    acls = [allow(ResourceType.TOPIC, topic, AclOperation.READ)]
    if group_acls:
        acls += [allow(ResourceType.GROUP, group, op) for op in (AclOperation.READ, AclOperation.DESCRIBE_CONFIGS)]
        acls.append(allow(ResourceType.GROUP, group, AclOperation.ALTER_CONFIGS))
    admin = kafka.admin()  # held: the futures fail if the client is collected (on a host: made inside it)
    for future in admin.create_acls(acls).values():
        future.result(timeout=30)


def job_security(kafka: EmbeddedKafka, user: str, ca_pem: Path | None = None) -> list[str]:
    """The job's `--set`s for a secured broker; the password comes from the environment."""
    assert kafka.security is not None
    return [
        "kafka.client.security.protocol=SASL_SSL",
        "kafka.client.sasl.mechanism=SCRAM-SHA-512",
        f"kafka.client.sasl.username={user}",
        f"kafka.client.sasl.password=env:{PASSWORD_ENV}",
        f"kafka.client.ssl.ca.location={ca_pem or kafka.security.tls.ca_pem}",
    ]
