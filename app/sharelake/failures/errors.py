"""One line out of an error that may hold a whole Java stack trace or a Python traceback.

Called wherever the job reports an error as one line: `sharelake.run.preflight` (the reason inside a
start-up ConfigError) and `sharelake.run.pipeline` (`run failed:`). py4j and Spark wrap the cause deep in
their text; the line a user needs is, in order: the exception that names a storage cause (read-only,
full, permission), what the Python code raised (foreachBatch errors carry its traceback), the
deepest `Caused by:`, the first Java exception line, else the first line.

`ConfigError` lives here too, its one home: the one-line error a job prints before it exits with
code 2. It is raised by the config's loading (`sharelake.config.loader`), the payload formats' start-up
checks (`sharelake.formats`) and the start-up checks (`sharelake.run.preflight`). `TableInUseError` ends a job
at start the same way (one line, exit code 2) when another live job writes one of its tables
(`sharelake.sink.delta.writer_lease`): the config is not at fault. `DependencyOutage` is the one line of
a dependency still down when the start-up's wait for it ran out (exit code 3,
`sharelake.failures.dependency_wait`): an outage, not a setting to fix.
"""

from __future__ import annotations

import re

# causes an operator fixes outside the job, found anywhere in a Java stack trace
STORAGE_CAUSES = ("No space left on device", "Read-only file system", "Permission denied", "Disk quota exceeded")
# the line a Python traceback ends with: `module.Name: message`
PYTHON_RAISED = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Fault|Exit|Interrupt)\b.*")
JAVA_EXCEPTION = re.compile(r"[\w.$]+(?:Exception|Error): ")


class ConfigError(ValueError):
    """A configuration problem, as one line naming the key and the fix."""


class TableInUseError(RuntimeError):
    """A table the job would write is written by another live Sharelake job (its S3 writer lease is
    being renewed), as one line naming the holder. Not a setting to fix but a job to stop (or a
    multi-writer log store to set); the job stops at start with exit code 2, as for a ConfigError."""


class DependencyUnavailable(RuntimeError):
    """A service a job needs (a schema registry, the broker) did not answer: not a record's fault, so
    the batch is RELEASEd and retried (at start: waited for, `sharelake.failures.dependency_wait`)."""


class DependencyOutage(RuntimeError):
    """A dependency (the broker, the schema registry) still down after the start-up waited
    `run.dependency_wait_s` for it, as one line naming it and the cause."""


def one_line(error: object, limit: int = 300) -> str:
    """The line of `error`'s text a user needs (see the module doc), at most `limit` characters."""
    raw = str(error).splitlines()
    lines = [line.strip() for line in raw if line.strip()]
    for cause in STORAGE_CAUSES:
        hit = next((line for line in lines if cause in line), None)
        if hit is not None:  # from the exception that names the cause, on a line that may hold several
            named = [m.start() for m in JAVA_EXCEPTION.finditer(hit[: hit.index(cause)])]
            return hit[named[-1] if named else 0 :].removeprefix("Caused by: ")[:limit]
    if any("Traceback (most recent call last)" in line for line in raw):
        raised = [line for line in raw if PYTHON_RAISED.match(line) and not line.startswith(("py4j", "pyspark"))]
        if raised:
            return raised[-1].strip()[:limit]
    deepest = [line.removeprefix("Caused by: ") for line in lines if line.startswith("Caused by:")]
    if deepest:
        return deepest[-1][:limit]
    java = next((line.removeprefix(": ") for line in lines if JAVA_EXCEPTION.search(line)), None)
    return (java or (lines[0] if lines else type(error).__name__))[:limit]
