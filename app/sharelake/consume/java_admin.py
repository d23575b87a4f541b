"""The Kafka Java client's Admin, made in the Spark driver's JVM from the job's librdkafka settings.

It is there for what confluent-kafka 2.16 has no admin call for: a share group's members and offsets (the Java
Admin has `describeShareGroups` and `listShareGroupOffsets`). The jar comes with the Spark jars
(`conf/maven/spark-jars.pom.xml`). `java_admin_config` maps the common librdkafka keys of `kafka.client` to the
Java client's: the broker, the security protocol, SASL PLAIN / SCRAM user and password (as a JAAS line), a PEM CA
file; the names of keys it cannot map are logged, their values never are. Its requests time out after
`ADMIN_TIMEOUT_MS` unless `kafka.client` sets `request.timeout.ms`. An admin `create_admin` made is closed with
`close_admin`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# librdkafka keys with the same name and meaning in the Java client
SAME_NAME = (
    "bootstrap.servers",
    "client.id",
    "request.timeout.ms",
    "sasl.kerberos.service.name",
    "ssl.endpoint.identification.algorithm",
)
LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# librdkafka keys that only steer librdkafka itself: nothing to map
LIBRDKAFKA_ONLY = ("debug", "log_level", "statistics.interval.ms", "enable.ssl.certificate.verification")
ADMIN_TIMEOUT_MS = 15_000


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def java_admin_config(client: Mapping[str, Any]) -> dict[str, str]:
    """The Java Admin's settings for librdkafka settings `client` (`KafkaConfig.client_config()`)."""
    settings = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in client.items()}
    out = {k: settings.pop(k) for k in SAME_NAME if k in settings}
    if "security.protocol" in settings:
        out["security.protocol"] = settings.pop("security.protocol").upper()
    mechanism = settings.pop("sasl.mechanism", None) or settings.pop("sasl.mechanisms", None)
    settings.pop("sasl.mechanisms", None)
    if mechanism is not None:
        out["sasl.mechanism"] = mechanism.upper()
    user, password = settings.pop("sasl.username", None), settings.pop("sasl.password", None)
    if user is not None and password is not None:
        module = LOGIN_MODULES.get(out.get("sasl.mechanism", "PLAIN"))
        if module is None:
            log.warning("the Java admin client has no login for sasl.mechanism %s", out.get("sasl.mechanism"))
        else:
            out["sasl.jaas.config"] = f"{module} required username={_quoted(user)} password={_quoted(password)};"
    ca = settings.pop("ssl.ca.location", None)
    if ca is not None:
        out["ssl.truststore.type"] = "PEM"
        out["ssl.truststore.location"] = ca
    if out.get("ssl.endpoint.identification.algorithm") == "none":
        out["ssl.endpoint.identification.algorithm"] = ""
    out.setdefault("request.timeout.ms", str(ADMIN_TIMEOUT_MS))
    out["default.api.timeout.ms"] = str(max(ADMIN_TIMEOUT_MS, int(out["request.timeout.ms"])))
    skipped = sorted(k for k, v in client.items() if k in settings and k not in LIBRDKAFKA_ONLY and _is_setting(v))
    if skipped:
        log.info("kafka.client keys the Java admin client does not take (left out): %s", ", ".join(skipped))
    return out


def _is_setting(value: Any) -> bool:
    return isinstance(value, str | int | float | bool)  # not the logger or a callback


def create_admin(spark: SparkSession, client: Mapping[str, Any]) -> Any:
    """A Java `org.apache.kafka.clients.admin.Admin` (a py4j proxy) in the driver's JVM; close it after use."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    props = jvm.java.util.Properties()
    for key, value in java_admin_config(client).items():
        props.setProperty(key, value)
    return jvm.org.apache.kafka.clients.admin.Admin.create(props)


def close_admin(spark: SparkSession, admin: Any) -> None:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    admin.close(jvm.java.time.Duration.ofSeconds(5))
