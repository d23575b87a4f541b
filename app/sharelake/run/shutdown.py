"""Graceful stop on SIGTERM/SIGINT, whichever driver process receives the signal.

Installed by `sharelake.commands.ingest` (the `sharelake ingest` subcommand, under spark-submit too).
Under spark-submit the driver is two processes: the JVM (parent) and the Python driver (child). A
signal to the Python process sets the stop event through a Python signal handler. A signal to the
JVM (what YARN and Kubernetes send to the container's main process, and what Ctrl-C sends to the
whole process group) starts the JVM's shutdown, which would stop the SparkContext at once, abort the
running Delta write and orphan the Python driver. So a shutdown hook is registered with Hadoop's
ShutdownHookManager at a priority above Spark's own hook: it runs first, sets the same stop event
and blocks until the pipeline has drained (members stopped, running batch finished and ACCEPTed, the
rest RELEASEd, consumers closed), bounded by `run.stop_timeout_s`. Only then does Spark's own
shutdown proceed.

The hook and Spark's listeners call into this Python process until the JVM has shut down, so after a
drain the JVM asked for, the Python driver waits for the JVM to go (`outlive_jvm`) instead of exiting
under it (each call into a gone Python printed a py4j stack trace). The JVM then exits with the
signal's code (143 for SIGTERM): a graceful stop, named so in the exit codes.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from types import FrameType
from typing import Any, ClassVar

from py4j.protocol import Py4JError
from pyspark.java_gateway import ensure_callback_server_started
from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# Hadoop runs shutdown hooks one by one, highest priority first; Spark's hook (which stops the
# SparkContext) is registered at FileSystem.SHUTDOWN_HOOK_PRIORITY + 30 = 40.
HOOK_PRIORITY = 100


class _JvmShutdownHook:
    """A java.lang.Runnable implemented in Python (py4j callback)."""

    def __init__(self, owner: GracefulShutdown):
        self._owner = owner

    def run(self) -> None:
        log.info("driver JVM is shutting down: draining first")
        self._owner.jvm_stopping.set()
        self._owner.stop_requested.set()
        if not self._owner.finished.wait(self._owner.timeout_s):
            log.warning("drain did not finish within %.0fs; letting the JVM shut down", self._owner.timeout_s)

    class Java:
        implements: ClassVar[list[str]] = ["java.lang.Runnable"]


class GracefulShutdown:
    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self.stop_requested = threading.Event()
        self.jvm_stopping = threading.Event()  # the JVM's shutdown hook asked for the drain
        self.finished = threading.Event()
        self._manager: Any = None  # Hadoop's ShutdownHookManager (py4j proxy), once installed
        self._jvm: Any = None
        self._thread: Any = None  # the java.lang.Thread wrapping our hook

    def install(self, spark: SparkSession) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        gateway = spark.sparkContext._gateway
        if gateway is None:  # pragma: no cover - a classic SparkSession always has one
            return
        ensure_callback_server_started(gateway)
        jvm = self._jvm = gateway.jvm
        hook = _JvmShutdownHook(self)
        self._hook = hook  # keep the Python object alive while the JVM holds its proxy
        # wrapped in a java.lang.Thread (a Runnable with Java's hashCode/equals: Hadoop keeps hooks in a set)
        self._manager = jvm.org.apache.hadoop.util.ShutdownHookManager.get()
        self._thread = jvm.java.lang.Thread(hook, "sharelake-drain")
        self._manager.addShutdownHook(
            self._thread,
            HOOK_PRIORITY,
            int(self.timeout_s + 30),
            jvm.java.util.concurrent.TimeUnit.SECONDS,
        )

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        log.info("received %s: draining", signal.Signals(signum).name)
        self.stop_requested.set()

    def done(self) -> None:
        """The pipeline has stopped: a waiting JVM hook may let Spark shut down now.

        On a normal end the hook is removed, so the JVM's exit does not call back into a Python
        process that has already gone.
        """
        self.finished.set()
        if not self.stop_requested.is_set() and self._thread is not None:
            try:
                self._manager.removeShutdownHook(self._thread)
            except Py4JError as e:  # the JVM is already shutting down: the hook will return at once
                log.debug("shutdown hook not removed: %s", e)

    def outlive_jvm(self, timeout_s: float = 60.0) -> None:
        """After a drain the JVM's shutdown asked for: wait until the JVM has gone (its later hooks and
        Spark's listeners may still call into this process), bounded by `timeout_s`. At once otherwise."""
        if not self.jvm_stopping.is_set() or self._jvm is None:
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                self._jvm.java.lang.System.currentTimeMillis()
            except (Py4JError, OSError):
                return  # the JVM is gone
            time.sleep(0.2)
