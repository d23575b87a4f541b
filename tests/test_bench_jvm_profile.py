"""bench.jvm_profile: a collapsed profile's stacks go to the first part a frame of theirs matches."""

from bench.jvm_profile import part_of, parts


def test_the_most_specific_part_wins() -> None:
    task = "[Executor task launch worker tid=7];java/lang/Thread.run;org/apache/spark/executor/Executor$TaskRunner.run"
    assert part_of(task.split(";")) == "task: executor run, (de)serialization"
    parquet = task + ";org/apache/parquet/hadoop/InternalParquetRecordWriter.write"
    assert part_of(parquet.split(";")) == "parquet: writer and statistics"
    assert part_of(["[main tid=1]", "java/lang/Object.wait"]) == "other"
    chmod = parquet + ";org/apache/hadoop/fs/RawLocalFileSystem.setPermission;org/apache/hadoop/util/Shell.runCommand"
    assert part_of(chmod.split(";")) == "hadoop local fs: shell forks"


def test_samples_are_summed_by_part() -> None:
    text = "\n".join(
        [
            "[Thread-5 tid=9];py4j/Gateway.run;org/apache/spark/sql/delta/OptimisticTransactionImpl.doCommit 30",
            "[Thread-5 tid=9];py4j/GatewayConnection.run;org/apache/spark/sql/delta/Snapshot.<init> 20",
            "[C2 CompilerThread0 tid=4];Compile::Optimize 5",
            "not a stack line",
        ]
    )
    assert parts(text) == {"delta: commit file, conflict check": 30, "delta: snapshot, log listing": 20, "jit": 5}
