"""Secret references in the config: `env:NAME` and `file:/path` values, read at start.

`resolve_secret` replaces such a value, when the config is validated, by the environment variable's value or the
file's content (stripped), so a password never has to be on a command line, where `ps` and cluster UIs show it.
Errors name the key and the fix, never the secret. `is_secret_key` tells the keys whose values are never shown,
in an error line or a log (`SECRET_WORDS`).
"""

from __future__ import annotations

import os
from pathlib import Path

SECRET_WORDS = ("password", "secret", "sasl", "auth")  # a config key holding one of these is never shown


def resolve_secret(key: str, value: str) -> str:
    """`value`, or what its `env:` / `file:` reference names; ValueError (one line) when unreadable."""
    if value.startswith("env:"):
        name = value.removeprefix("env:")
        if name not in os.environ:
            raise ValueError(
                f"{key} reads environment variable {name}, which is not set: "
                "set it in the job's environment (spark.yarn.appMasterEnv / spark.kubernetes.driverEnv)"
            )
        return os.environ[name]
    if value.startswith("file:"):
        path = Path(value.removeprefix("file:"))
        try:
            return path.read_text().strip()
        except OSError as e:
            raise ValueError(
                f"{key} reads file {path}, which cannot be read ({e.strerror}): "
                "mount or ship the file, readable by the job's user"
            ) from None
    return value


def is_secret_key(key: str) -> bool:
    """Whether a config key's value must never be shown (in an error line or a log)."""
    return any(word in key for word in SECRET_WORDS)
