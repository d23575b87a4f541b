"""The schema registry client: writer schemas by id over the Confluent REST API (Apicurio's ccompat too).

`SchemaRegistry` offers `check` at start, `writer_schema` per new id (None for an id the registry does not have;
a schema with references comes back marked `"references"`, not resolved) and `probe` after an outage. A registry
that does not answer, or refuses us (timeout, 5xx, 401/403), raises `RegistryUnavailableError`: never the
record's fault. At start a refusal (401/403), a 404 (the URL's path is not a registry's) or an address that does
not resolve is a wrong setting (`ConfigError`, one line); no answer, a refused connection or a 5xx is an outage
the start waits out (`sharelake.failures.dependency_wait`). Its settings (`RegistrySettings`, `[payload.registry]`)
live in `sharelake.formats.base`, beside the other keys every format has. `WarmUpRegistry` stands in for it in the
warm-up: it serves one built-in schema under `WARM_UP_ID`, with no network.
"""

from __future__ import annotations

from sharelake.failures.errors import ConfigError, DependencyUnavailable, one_line
from sharelake.formats.base import RegistrySettings


class RegistryUnavailableError(DependencyUnavailable):
    """The schema registry did not answer, or refused us: the batch is RELEASEd and retried."""


class SchemaRegistry:
    """Writer schemas by id from a Confluent-compatible registry, each fetched once per job."""

    def __init__(self, settings: RegistrySettings):
        from confluent_kafka.schema_registry import SchemaRegistryClient

        self.settings = settings
        self.url = settings.url  # holds no credentials (the settings refuse them)
        self._client = SchemaRegistryClient(settings.client_conf())

    def check(self) -> None:
        """At start: the registry answers and lets us in. ConfigError (one line) when the settings are
        wrong (refused, unknown host); RegistryUnavailableError when it is down (no answer, 5xx)."""
        try:
            self._client.get_subjects()
        except Exception as e:  # noqa: BLE001 - every failure is one or the other
            line = (
                f"payload.registry.url = {self.url!r}: {self._cause(e)}; check the address, "
                "payload.registry.basic_auth_user / basic_auth_password and ca_location"
            )
            raise (ConfigError(line) if self._wrong_setting(e) else RegistryUnavailableError(line)) from None

    def writer_schema(self, schema_id: int) -> tuple[str, str | None] | None:
        """(schema JSON, its type) for `schema_id`; None if the registry has no such id (404)."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            schema = self._client.get_schema(schema_id)
        except SchemaRegistryError as e:
            if e.http_status_code == 404:
                return None
            raise RegistryUnavailableError(f"schema registry {self.url}: {self._cause(e)}") from None
        except Exception as e:  # noqa: BLE001 - transport errors (refused, timeout, TLS): not the record's fault
            raise RegistryUnavailableError(f"schema registry {self.url}: {self._cause(e)}") from None
        if schema.references:
            return schema.schema_str or "", "references"
        return schema.schema_str or "", schema.schema_type

    def probe(self) -> None:
        """RegistryUnavailableError unless the registry answers now."""
        try:
            self._client.get_subjects()
        except Exception as e:  # noqa: BLE001 - any failure: still unavailable
            raise RegistryUnavailableError(f"schema registry {self.url}: {self._cause(e)}") from None

    @staticmethod
    def _wrong_setting(e: BaseException) -> bool:
        """A refusal (401/403), a 404 (the URL's path is not a registry's) or a host that does not
        resolve: waiting will not change it. A timeout, a refused connection or a 5xx may pass."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        if isinstance(e, SchemaRegistryError):
            return e.http_status_code in (401, 403, 404)
        text = str(e)
        return any(s in text for s in ("Name or service not known", "nodename nor servname", "No address associated"))

    def _cause(self, e: BaseException) -> str:
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        if isinstance(e, SchemaRegistryError):
            status = e.http_status_code
            if status in (401, 403):
                return f"refused us (HTTP {status}: {e.error_message})"
            return f"answered HTTP {status} ({e.error_message})"
        kind = type(e).__name__
        if "Timeout" in kind:
            return f"did not answer within payload.registry.timeout_s = {self.settings.timeout_s}s ({kind})"
        return f"unreachable ({kind}: {one_line(e, 160)})"


WARM_UP_ID = 2**31 - 1  # the schema id of the warm-up's values (no registry hands out ids this high)


class WarmUpRegistry:
    """The warm-up's registry: knows only one built-in schema (the warm-up must not need the network)."""

    url = "(warm-up)"

    def __init__(self, schema: str, schema_type: str | None):
        self.schema, self.schema_type = schema, schema_type

    def writer_schema(self, schema_id: int) -> tuple[str, str | None] | None:
        return (self.schema, self.schema_type) if schema_id == WARM_UP_ID else None

    def probe(self) -> None:
        return None
