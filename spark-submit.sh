#!/usr/bin/env bash
# Submit a Sharelake job with the project's venv, the Delta jars and the app package.
#
#   ./spark-submit.sh [--master URL] [--dry-run] jobs/ingest.py --config conf/local.toml [job args]
#
# --master defaults to $SPARK_MASTER or local[2]. --dry-run prints the spark-submit command only.
# Run `make setup` once first (venv, pinned packages, Maven-resolved jars under .cache/).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${SHARELAKE_CACHE:-$root/.cache}"
venv="$cache/venv"
master="${SPARK_MASTER:-local[2]}"
dry_run=0
while [ $# -gt 0 ]; do
  case "$1" in
    --master) master="$2"; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || { echo "usage: $0 [--master URL] [--dry-run] JOB.py [job args]" >&2; exit 2; }
if [ ! -x "$venv/bin/spark-submit" ] || ! ls "$cache"/jars/spark/*.jar >/dev/null 2>&1; then
  echo "sharelake: not set up yet: run 'make setup' (venv, pinned packages, jars under $cache)" >&2
  exit 2
fi
jars="$(ls "$cache"/jars/spark/*.jar | paste -sd, -)"

export PYSPARK_PYTHON="$venv/bin/python" PYSPARK_DRIVER_PYTHON="$venv/bin/python"
export SHARELAKE_SUBMITTED=1
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
local_conf=()
case "$master" in
  local*)
    export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
    # Delta rebuilds table snapshots (and writes its every-10-commits checkpoint) with 50 tasks by
    # default; on a local driver that costs seconds per checkpoint, inside a micro-batch
    local_conf=(--conf spark.databricks.delta.snapshotPartitions=4 --conf spark.sql.shuffle.partitions=4)
    ;;
esac
log4j="-Dlog4j2.configurationFile=file:$root/conf/log4j2.properties"
cmd=("$venv/bin/spark-submit" --master "$master" --jars "$jars"
  --conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension
  --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog
  --conf spark.ui.showConsoleProgress=false
  --conf "spark.driver.extraJavaOptions=$log4j"
  "${local_conf[@]}"
  "$@")
if [ "$dry_run" = 1 ]; then
  printf '%q ' "${cmd[@]}"; echo
  exit 0
fi
exec "${cmd[@]}"
