"""TLS and SASL/SCRAM for the embedded broker: a SASL_SSL listener and the standard authorizer.

Given to the broker as `EmbeddedKafka(security=...)`. `make_tls` creates a fresh
self-signed certificate with Java's keytool (no extra package: the JDK the broker runs on has it)
for the addresses clients reach the broker by (127.0.0.1 and localhost unless told; a broker on a
host of a `devkit.network`: that host's address, which clients check it against), as a PKCS12
keystore for the broker, a truststore for its own inter-broker client, and a PEM file for
clients' `ssl.ca.location`. `Security` holds the users and their SCRAM-SHA-512 passwords (created
in the cluster metadata when the storage is formatted) and gives the broker settings and the
librdkafka settings of any user. `admin` is the only super user; every other principal gets
exactly the ACLs a test grants it.
"""

from __future__ import annotations

import ipaddress
import secrets
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

MECHANISM = "SCRAM-SHA-512"
ADMIN = "admin"


@dataclass(frozen=True)
class Tls:
    keystore: Path  # PKCS12: the broker's key and self-signed certificate
    truststore: Path  # PKCS12: that certificate, for the broker's own inter-broker connections
    ca_pem: Path  # the certificate as PEM, for clients' ssl.ca.location
    password: str


LOOPBACK_NAMES = ("127.0.0.1", "localhost")


def make_tls(folder: Path, name: str = "broker", addresses: Sequence[str] = LOOPBACK_NAMES) -> Tls:
    """A self-signed certificate valid for `addresses` (IP addresses and DNS names: its subject
    alternative names, which clients verify the broker's address against), made with keytool."""
    if not addresses:
        raise ValueError("a certificate names at least one address")
    san = ",".join(f"ip:{a}" if _is_ip(a) else f"dns:{a}" for a in addresses)
    cn = next((a for a in addresses if not _is_ip(a)), addresses[0])  # a name if there is one
    folder.mkdir(parents=True, exist_ok=True)
    password = secrets.token_hex(12)
    keystore, truststore, pem = folder / f"{name}.p12", folder / f"{name}-trust.p12", folder / f"{name}.pem"
    for path in (keystore, truststore, pem):
        path.unlink(missing_ok=True)
    store = ["-storetype", "PKCS12", "-storepass", password]
    _keytool(
        "-genkeypair", "-alias", name, "-keyalg", "RSA", "-keysize", "2048", "-validity", "7",
        "-dname", f"CN={cn}, O=sharelake-{name}", "-ext", f"SAN={san}",
        "-ext", "BC=ca:true", "-keystore", str(keystore), "-keypass", password, *store,
    )  # fmt: skip
    _keytool("-exportcert", "-alias", name, "-rfc", "-file", str(pem), "-keystore", str(keystore), *store)
    _keytool("-importcert", "-noprompt", "-alias", name, "-file", str(pem), "-keystore", str(truststore), *store)
    return Tls(keystore, truststore, pem, password)


def _is_ip(address: str) -> bool:
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return False
    return True


def _keytool(*args: str) -> None:
    done = subprocess.run(["keytool", *args], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"keytool {args[0]} failed: {done.stdout}{done.stderr}")


@dataclass
class Security:
    """A SASL_SSL listener's TLS material and SCRAM users (name -> password; `admin` is added)."""

    tls: Tls
    users: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.users.setdefault(ADMIN, secrets.token_hex(12))

    def format_args(self) -> list[str]:
        """`kafka-storage format` arguments that create every user's SCRAM credential."""
        out: list[str] = []
        for name, password in self.users.items():
            out += ["--add-scram", f"{MECHANISM}=[name={name},password={password}]"]
        return out

    def broker_settings(self) -> dict[str, str]:
        admin = self.users[ADMIN]
        return {
            "sasl.enabled.mechanisms": MECHANISM,
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config": (
                f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{ADMIN}" '
                f'password="{admin}";'
            ),
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(self.tls.keystore),
            "ssl.keystore.password": self.tls.password,
            "ssl.key.password": self.tls.password,
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.location": str(self.tls.truststore),
            "ssl.truststore.password": self.tls.password,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            # the controller listener stays PLAINTEXT on loopback: its connections are ANONYMOUS
            "super.users": f"User:{ADMIN};User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "false",
        }

    def client(self, user: str = ADMIN, password: str | None = None, ca_pem: Path | None = None) -> dict[str, str]:
        """librdkafka settings for `user` (its own password unless one is given; another CA to test distrust)."""
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": MECHANISM,
            "sasl.username": user,
            "sasl.password": self.users[user] if password is None else password,
            "ssl.ca.location": str(ca_pem or self.tls.ca_pem),
        }
