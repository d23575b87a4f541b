"""The one line `run failed:` and start-up errors give for an error that holds a whole Java stack trace (pure logic)."""

from __future__ import annotations

from sharelake.failures.errors import one_line

TRACE = """[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function in foreach batch sink.
py4j.protocol.Py4JJavaError: An error occurred while calling o812.save.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 3.0 failed 1 times
\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:2856)
Caused by: java.io.IOException: Mkdirs failed to create file:/mnt/t/part-00000.parquet
\tat org.apache.hadoop.fs.ChecksumFileSystem.create(ChecksumFileSystem.java:715)
Caused by: java.nio.file.FileSystemException: /mnt/t/part-00000.parquet: Read-only file system
\tat java.base/sun.nio.fs.UnixException.translateToIOException(UnixException.java:100)
"""


def test_a_storage_cause_anywhere_in_the_trace_is_the_line() -> None:
    assert one_line(TRACE) == "java.nio.file.FileSystemException: /mnt/t/part-00000.parquet: Read-only file system"


def test_the_line_starts_at_the_exception_that_names_the_cause() -> None:
    line = (
        ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 9.0 failed 1 times, "
        "most recent failure: Lost task 0.0 (TID 9) (127.0.0.1 executor driver): java.io.FileNotFoundException: "
        "/mnt/t/part-00000-3f9c.snappy.parquet (Read-only file system)"
    )
    assert one_line(f"boom\n{line}\n\tat x") == (
        "java.io.FileNotFoundException: /mnt/t/part-00000-3f9c.snappy.parquet (Read-only file system)"
    )


def test_otherwise_the_deepest_cause_or_the_first_line() -> None:
    assert one_line("boom\nCaused by: a.B: first\nCaused by: c.D: deepest\n\tat x") == "c.D: deepest"
    assert one_line("share member failed: KafkaException(...)") == "share member failed: KafkaException(...)"
    assert len(one_line("x" * 5000)) == 300


def test_a_python_traceback_gives_what_the_python_code_raised() -> None:
    proxy = (
        "An exception was raised by the Python Proxy. Return Message: Traceback (most recent call last):\n"
        '  File "/x/py4j/clientserver.py", line 644, in _call_proxy\n'
        "    return_value = getattr(self.pool[obj_id], method)(*params)\n"
        '  File "/w/app/failures/faults.py", line 61, in hit\n'
        "    raise InjectedFault(f'injected failure at {point} (hit {n})')\n"
        "sharelake.failures.faults.InjectedFault: injected failure at before_delta_commit (hit 3)\n"
    )
    assert one_line(proxy) == "sharelake.failures.faults.InjectedFault: injected failure at before_delta_commit (hit 3)"


def test_a_py4j_error_gives_its_java_exception_not_the_call() -> None:
    py4j = (
        "An error occurred while calling o51.create.\n"
        ": java.io.IOException: Mkdirs failed to create /x\n\tat a.B(C.java:1)"
    )
    assert one_line(py4j, 200) == "java.io.IOException: Mkdirs failed to create /x"
