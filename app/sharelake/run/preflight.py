"""Start-up checks of the resources the config names: broker, topic, share-group settings, table path.

They run before any member polls; `check_start` with `apply=False` runs the same checks changing
nothing on the broker (`sharelake check`). Each problem raises `ConfigError`
with one line naming the key or the resource and the fix; the job prints it and exits with code 2.
A broker that does not answer (none up yet, a cut network) is an outage, not a problem of the config:
`DependencyUnavailable`, which the start waits out (`sharelake.failures.dependency_wait`); an address that
does not resolve is a wrong setting, and so is a broker certificate that does not verify, said at once:
the broker is asked in slices of its wait, the client's errors read after each (`certificate_refused`).
A table's store (S3) that does not answer is an outage too; a path that cannot be written is a wrong
setting. Messages never include `kafka.client` values (they hold credentials).
"""

from __future__ import annotations

import os
import re
import socket
import ssl
import time
import uuid
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata
from pyspark.sql import SparkSession

from sharelake.config.routes import Routes
from sharelake.config.settings import SharelakeConfig
from sharelake.consume.broker_settings import AUTHORIZATION, read_broker_settings
from sharelake.consume.group_type import GroupType
from sharelake.failures.errors import ConfigError, DependencyUnavailable, one_line
from sharelake.sink.delta.catalog_tables import located_routes
from sharelake.sink.delta.commit_lock import create_lock_file, lock_path, on_local_disk
from sharelake.sink.delta.writer_lease import LEASE_SUFFIX, OLD_LEASE_FILE, needs_lease
from sharelake.table.location import TableLocation

BROKER_TIMEOUT_S = 15.0  # how long start-up waits for a broker to answer
BROKER_SLICE_S = 1.0  # each ask of that wait, after which the client's errors are read
PROBE_PREFIX = "_sharelake_write_probe"  # the file written (and deleted) to check a table path is writable
# what a store that did not answer leaves in its error (S3A and the AWS SDK: refused, timed out, 5xx):
# an outage the start waits out, unlike a path, a permission or a host name to fix
STORE_OUTAGE = (
    "java.net.ConnectException",
    "ConnectTimeoutException",
    "SocketTimeoutException",
    "Unable to execute HTTP request",
    "Status Code: 500",
    "Status Code: 503",
)


SPARK_CONNECT_MESSAGE = (
    "Spark Connect session: foreachBatch would run on the Spark Connect server, away from the share "
    "consumers in this driver, so records could not be acknowledged; run Sharelake with spark-submit "
    "(client or cluster deploy mode) on local, standalone, YARN or Kubernetes, or as a Databricks job on a "
    "classic cluster in dedicated (single user) access mode, not serverless or standard (shared) access mode"
)


def check_not_spark_connect(spark: SparkSession | None = None) -> None:
    """Sharelake's pump lives in the driver; under Spark Connect the driver is elsewhere."""
    remote = bool(os.environ.get("SPARK_REMOTE") or os.environ.get("SPARK_CONNECT_MODE_ENABLED"))
    if spark is not None:
        remote = remote or type(spark).__module__.startswith("pyspark.sql.connect")
    if remote:
        raise ConfigError(SPARK_CONNECT_MESSAGE)


class ClientErrors:
    """The errors librdkafka reports through `error_cb` while start-up waits on the broker: a failed
    SASL authentication or TLS handshake shows up only here, the call itself just times out."""

    def __init__(self) -> None:
        self.seen: list[KafkaError] = []

    def __call__(self, error: KafkaError) -> None:
        self.seen.append(error)

    def first(self, *codes: int) -> KafkaError | None:
        return next((e for e in self.seen if e.code() in codes), None)


def security_problem(cfg: SharelakeConfig, errors: ClientErrors) -> ConfigError | None:
    """A failed authentication or TLS handshake, as the one line naming the setting to fix (a trusted
    certificate that names another address than the one dialled: the address)."""
    where = cfg.kafka.bootstrap_servers
    auth = errors.first(KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED)
    if auth is not None:
        user = cfg.kafka.client.get("sasl.username", "?")
        return ConfigError(
            f"kafka.client.sasl.username / sasl.password: authentication failed for user {user!r} on {where} "
            f"({auth.str()[:300]}); fix the credentials or kafka.client.sasl.mechanism"
        )
    tls = errors.first(KafkaError._SSL)
    mismatch = certificate_name_mismatch(cfg.kafka.client, tls.str(), where) if tls is not None else None
    if mismatch is not None:
        return ConfigError(
            f"kafka.bootstrap_servers = {where!r}: the TLS handshake failed: the broker's certificate is trusted "
            f"but does not name the address dialled ({mismatch}); connect by an address the certificate names, "
            "or give the broker a certificate naming this one"
        )
    if tls is not None:
        return ConfigError(
            f"kafka.client.ssl.ca.location: the TLS handshake with {where} failed ({tls.str()[:300]}); point it "
            "at the CA certificate that signed the broker's certificate"
        )
    return None


def certificate_refused(cfg: SharelakeConfig, errors: ClientErrors) -> ConfigError | None:
    """The one line for a TLS handshake that failed because the broker's certificate did not verify
    (librdkafka's `_SSL` error saying "certificate verify failed"): it will not verify later, so the
    start need not wait for the broker. Other TLS errors (a handshake cut off) may be an outage: None."""
    refused = any(e.code() == KafkaError._SSL and "certificate verify failed" in e.str() for e in errors.seen)
    return security_problem(cfg, errors) if refused else None


# `sasl_ssl://host:port/bootstrap: SSL handshake failed: ...`: the broker librdkafka names
FAILED_BROKER = re.compile(r"^\w+://(?P<address>[^/\s]+)/")
# OpenSSL's verify codes for a certificate that chains to a trusted CA but names another host or IP
NAME_MISMATCH = (62, 64)  # X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH
PROBE_TIMEOUT_S = 5.0


def certificate_name_mismatch(client: dict[str, Any], tls_error: str, bootstrap: str) -> str | None:
    """OpenSSL's reason when the broker's certificate chains to the configured CA but does not name
    the address dialled (librdkafka says "certificate verify failed" for either); else None.

    One TLS handshake of its own, from this process, with the client's CA (`ssl.ca.location` or
    `ssl.ca.pem`) and hostname verification (`ssl.endpoint.identification.algorithm`, librdkafka's
    default `https`), only after librdkafka's own handshake failed so."""
    if "certificate verify failed" not in tls_error:
        return None
    if str(client.get("ssl.endpoint.identification.algorithm", "https")).lower() != "https":
        return None
    named = FAILED_BROKER.match(tls_error)
    address = named.group("address") if named else bootstrap.split(",")[0].split("://")[-1]
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    ca = str(client.get("ssl.ca.location", ""))
    try:
        context = ssl.create_default_context(
            cafile=ca if os.path.isfile(ca) else None,
            capath=ca if os.path.isdir(ca) else None,
            cadata=client.get("ssl.ca.pem"),
        )
        with (
            socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT_S) as raw,
            context.wrap_socket(raw, server_hostname=host),
        ):
            return None
    except ssl.SSLCertVerificationError as e:
        return str(e.verify_message) if e.verify_code in NAME_MISMATCH else None
    except (OSError, ValueError):  # unreachable now, a handshake refused for another reason: not diagnosed
        return None


@dataclass(frozen=True)
class KafkaFacts:
    """What start-up learned of the broker: the group's effective settings, the broker's lock cap."""

    group_settings: dict[str, str]  # a share group's, with the broker's values of those a 4.2 broker keeps there
    broker_lock_cap: int | None  # the group type's (a share group's group.share.max.partition.max.record.locks)
    partitions: int  # of the subscribed topics, together


def broker_metadata(admin: AdminClient, cfg: SharelakeConfig, errors: ClientErrors) -> ClusterMetadata:
    """The cluster's metadata, asked for up to `BROKER_TIMEOUT_S` in slices of `BROKER_SLICE_S`, reading
    the client's errors after each: a certificate that does not verify is a ConfigError at once.
    After the wait, a failed authentication or TLS handshake or an address that does not resolve is a
    ConfigError too; no answer is `DependencyUnavailable` (an outage, waited out by the caller)."""
    k = cfg.kafka
    deadline = time.monotonic() + BROKER_TIMEOUT_S
    while True:
        try:
            return admin.list_topics(timeout=max(0.1, min(BROKER_SLICE_S, deadline - time.monotonic())))
        except KafkaException as e:
            admin.poll(0.1)  # serve the error callbacks librdkafka queued meanwhile (authentication, TLS)
            refused = certificate_refused(cfg, errors)
            if refused is not None:
                raise refused from None
            if time.monotonic() < deadline:
                continue
            problem = security_problem(cfg, errors)
            if problem is not None:
                raise problem from None
            unresolved = errors.first(KafkaError._RESOLVE)
            if unresolved is not None:
                raise ConfigError(
                    f"kafka.bootstrap_servers = {k.bootstrap_servers!r}: the address does not resolve "
                    f"({unresolved.str()[:200]}); fix the host name"
                ) from None
            raise DependencyUnavailable(
                f"kafka.bootstrap_servers = {k.bootstrap_servers!r}: no broker answered within "
                f"{BROKER_TIMEOUT_S:.0f}s ({one_line(e, 200)}); check the address, the listener and the "
                "kafka.client security settings"
            ) from None


def check_kafka(
    admin: AdminClient, cfg: SharelakeConfig, group: GroupType, errors: ClientErrors | None = None, apply: bool = True
) -> KafkaFacts:
    """Broker reachable, topic present, the group type's start-up done (a share group's settings
    accepted); what the job needs to know of them.

    `errors`: the admin client's `error_cb`, to name an authentication or TLS failure; `apply=False`
    (`sharelake check`): change nothing on the broker."""
    k = cfg.kafka
    errors = errors or ClientErrors()
    user = k.client.get("sasl.username", "(the client's principal)")
    metadata = broker_metadata(admin, cfg, errors)
    partitions = 0
    for name in k.subscribed:
        key = f"kafka.topic = {name!r}" if k.topic is not None else f"kafka.topics names {name!r}"
        topic = metadata.topics.get(name)
        if topic is not None and topic.error is not None and topic.error.code() in AUTHORIZATION:
            raise ConfigError(
                f"{key}: {user} is not authorized to read it ({topic.error.str()}); grant it READ "
                "on the topic (docs/security.md)"
            )
        if topic is None or topic.error is not None:
            raise ConfigError(f"{key}: no such topic on {k.bootstrap_servers}; create it or fix the name")
        partitions += len(topic.partitions)
    broker = read_broker_settings(admin, next(iter(metadata.brokers), 1))
    cap = group.broker_lock_cap(k, broker)
    return KafkaFacts(group.prepare(admin, k, metadata, broker, apply), cap, partitions)


def check_dead_letter_cap(cfg: SharelakeConfig, group: GroupType, group_settings: dict[str, str]) -> None:
    """The dead-letter delivery cap is below the group's limit (the setting its type names), where the broker
    archives unseen."""
    setting = group.delivery_limit_setting
    limit = None if setting is None else group_settings.get(setting)
    cap = cfg.dead_letter.max_delivery_count
    if limit is not None and limit.isdigit() and cap >= int(limit):
        raise ConfigError(
            f"dead_letter.max_delivery_count = {cap} is not below the {group.noun}'s {setting} ({limit}): "
            f"the broker would archive a failing record before it reaches the dead-letter table; set it to "
            f"{int(limit) - 1} or less"
        )


def _ours(name: str) -> bool:
    """Files Sharelake keeps in a table's folder before the table exists: a writability probe (of
    this or another starting job), an older version's S3 writer lease (sharelake.sink.delta.writer_lease:
    the start waits it out, then removes it)."""
    return PROBE_PREFIX in name or name == OLD_LEASE_FILE.split("/")[0]


def check_table_path(spark: SparkSession, location: TableLocation, key: str = "delta.table_path") -> None:
    """The path is a Delta table, or empty / absent (the first write creates it), and writable; so is
    the folder of what guards its commits (`check_commit_guard`)."""
    _check_table_folder(spark, location, key)
    check_commit_guard(spark, location, key)


def check_commit_guard(spark: SparkSession, location: TableLocation, key: str) -> None:
    """The commit lock's folder on a local disk, the writer lease's folder on S3 (both beside the table:
    its parent folder): writable, else one line naming the folder and the fix."""
    if on_local_disk(location):
        try:
            create_lock_file(location)
        except OSError as e:
            lock = lock_path(location)
            folder = os.path.dirname(lock)
            raise ConfigError(
                f"{key} = {location.path!r}: the table's commit lock {lock} cannot be created ({e.strerror}): make "
                f"{folder} writable by the job, or put the table in a folder it can write"
            ) from None
    elif needs_lease(spark, location):
        try:
            # with its slash: the folder holding a table may be a bucket's root (`s3a://bucket/`)
            folder = location.beside(LEASE_SUFFIX).rpartition("/")[0] + "/"
        except ValueError:
            return  # a table at a bucket's root: its lease stops the start, naming it (WriterLease)
        try:
            _write_probe(spark, folder)
        except Exception as e:  # noqa: BLE001 - any storage error means: not usable as configured
            if _store_outage(e):
                raise DependencyUnavailable(
                    f"{key} = {location.path!r}: the table's store did not answer ({one_line(e, 200)}); check that "
                    "it is up and reachable from the driver"
                ) from None
            raise ConfigError(
                f"{key} = {location.path!r}: the writer lease's folder {folder} is not writable ({one_line(e, 200)}); "
                f"let the job write and delete files in {folder} (it keeps the table's lease there)"
            ) from None


def _write_probe(spark: SparkSession, folder: str) -> None:
    """A file of its own name written in `folder` (made when absent) and deleted; the store's error if not."""
    sc = spark.sparkContext
    jvm = sc._jvm
    assert jvm is not None and sc._jsc is not None
    path = jvm.org.apache.hadoop.fs.Path(folder)
    fs = path.getFileSystem(sc._jsc.hadoopConfiguration())
    # a name of its own: jobs starting together on one table never touch each other's probe
    probe = jvm.org.apache.hadoop.fs.Path(path, f"{PROBE_PREFIX}-{uuid.uuid4().hex}")
    fs.mkdirs(path)
    fs.create(probe, True).close()
    fs.delete(probe, False)


def _store_outage(e: Exception) -> bool:
    """Whether a storage error says the store did not answer (not a path or a permission to fix)."""
    text = str(e)
    return any(cause in text for cause in STORE_OUTAGE) and "UnknownHostException" not in text


def _check_table_folder(spark: SparkSession, location: TableLocation, key: str) -> None:
    """`location` is a Delta table, or holds none of anyone's data, and a file can be written in it."""
    table_path = location.path
    sc = spark.sparkContext
    jvm = sc._jvm
    assert jvm is not None and sc._jsc is not None
    path = jvm.org.apache.hadoop.fs.Path(table_path)
    try:
        fs = path.getFileSystem(sc._jsc.hadoopConfiguration())
        log_dir = jvm.org.apache.hadoop.fs.Path(location.delta_log)
        if fs.exists(path) and not fs.exists(log_dir):
            # another job starting on the same new table may be probing it right now: its probe is not data
            held = [s for s in fs.listStatus(path) if not _ours(s.getPath().getName())]
            if fs.getFileStatus(path).isFile() or held:
                raise ConfigError(
                    f"{key} = {table_path!r}: the path holds data but is not a Delta table; "
                    "point it at a Delta table or at a new, empty path"
                )
        _write_probe(spark, table_path)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - any storage error means: not usable as configured
        text = str(e)
        if _store_outage(e):
            raise DependencyUnavailable(
                f"{key} = {table_path!r}: the table's store did not answer ({one_line(e, 200)}); check that it is up "
                "and reachable from the driver"
            ) from None
        missing = ("ClassNotFoundException" in text and "S3AFileSystem" in text) or "No FileSystem for scheme" in text
        if table_path.startswith("s3a://") and missing:
            raise ConfigError(
                f"{key} = {table_path!r}: Hadoop's S3A connector is not on Spark's classpath; run `make s3` "
                "(hadoop-aws and the AWS SDK's S3 modules, into .cache/jars/s3/) or use a cluster image that has it"
            ) from None
        raise ConfigError(
            f"{key} = {table_path!r}: not writable ({one_line(e, 200)}); fix the path or its permissions"
        ) from None


def check_start(
    spark: SparkSession,
    cfg: SharelakeConfig,
    admin: AdminClient,
    group: GroupType,
    errors: ClientErrors,
    apply: bool = True,
) -> tuple[KafkaFacts, Routes]:
    """Every start-up check but the formats' (`sharelake.sink.write.destinations` starts those): the broker and the
    group (`check_kafka`), the dead-letter cap, the tables by catalog name, each table path. The
    broker's facts, and the routes with each table located."""
    check_not_spark_connect(spark)
    facts = check_kafka(admin, cfg, group, errors, apply)  # raises ConfigError: one line, exit code 2
    check_dead_letter_cap(cfg, group, facts.group_settings)
    routes = located_routes(spark, cfg)  # tables by catalog name
    for location, key in routes.keyed_tables():
        check_table_path(spark, location, key=key)
    return facts, routes
