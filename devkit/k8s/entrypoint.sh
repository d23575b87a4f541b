#!/bin/bash
# Sharelake image's entrypoint (/opt/sharelake/entrypoint.sh): the container contract of Spark on
# Kubernetes, for an image whose Spark is pip's pyspark (which ships no entrypoint of its own).
#
#   driver ARGS...   the driver pod (cluster mode): Spark's submit client starts it with
#                    `driver --properties-file /opt/spark/conf/spark.properties --class ... APP ARGS`;
#                    this runs `spark-submit --deploy-mode client` there, bound to the pod's IP
#                    (SPARK_DRIVER_BIND_ADDRESS, set by Spark from status.podIP).
#   executor         an executor pod: the driver creates it with this one argument and its settings
#                    in the environment (SPARK_DRIVER_URL, SPARK_EXECUTOR_ID, SPARK_EXECUTOR_CORES,
#                    SPARK_EXECUTOR_MEMORY, SPARK_APPLICATION_ID, SPARK_EXECUTOR_POD_IP,
#                    SPARK_EXECUTOR_POD_NAME, SPARK_RESOURCE_PROFILE_ID, SPARK_JAVA_OPT_0..N,
#                    SPARK_CLASSPATH); this runs KubernetesExecutorBackend with them.
#   anything else    run as given, under tini too (`python -c ...`, `bash`, `sharelake --help`).
#
# Spark's roles run under tini (-s: it reaps and forwards signals even when it is not PID 1), and
# the JVM is tini's direct child (spark-submit and spark-class exec into it): the SIGTERM Kubernetes
# sends on pod deletion reaches the driver JVM, and Sharelake's graceful stop runs within
# run.stop_timeout_s (keep terminationGracePeriodSeconds above it).
set -euo pipefail

die() { echo "sharelake-entrypoint: $*" >&2; exit 2; }

: "${SPARK_HOME:?sharelake-entrypoint: SPARK_HOME is not set (the image sets it to pyspark in /opt/venv)}"
java="${JAVA_HOME:+$JAVA_HOME/bin/}java"

# The Python of the driver and of every Python worker: the venv's, unless the pod says otherwise
# (Spark sets PYSPARK_PYTHON and PYSPARK_DRIVER_PYTHON from spark.pyspark.python / .driver.python)
export PYSPARK_PYTHON="${PYSPARK_PYTHON:-/opt/venv/bin/python}"
export PYSPARK_DRIVER_PYTHON="${PYSPARK_DRIVER_PYTHON:-$PYSPARK_PYTHON}"

# The executor's class path, in Spark's order: the conf folder (Spark mounts its ConfigMap at
# SPARK_CONF_DIR), HADOOP_CONF_DIR, spark.executor.extraClassPath (SPARK_CLASSPATH), Spark's jars
# (Delta's and the job's are among them), SPARK_EXTRA_CLASSPATH, the working directory (files and
# jars the driver ships land there), SPARK_DIST_CLASSPATH.
executor_classpath() {
  local cp="${SPARK_HOME}/jars/*"
  if [ -n "${SPARK_CLASSPATH:-}" ]; then cp="$SPARK_CLASSPATH:$cp"; fi
  if [ -n "${SPARK_EXTRA_CLASSPATH:-}" ]; then cp="$cp:$SPARK_EXTRA_CLASSPATH"; fi
  if [ -n "${HADOOP_CONF_DIR:-}" ]; then cp="$HADOOP_CONF_DIR:$cp"; fi
  cp="${SPARK_CONF_DIR:-$SPARK_HOME/conf}:$cp:$PWD"
  if [ -n "${SPARK_DIST_CLASSPATH:-}" ]; then cp="$cp:$SPARK_DIST_CLASSPATH"; fi
  printf '%s' "$cp"
}

case "${1:-}" in
  driver)
    shift
    : "${SPARK_DRIVER_BIND_ADDRESS:?sharelake-entrypoint: driver needs SPARK_DRIVER_BIND_ADDRESS (Spark sets it to the pod IP)}"
    exec /usr/bin/tini -s -- "$SPARK_HOME/bin/spark-submit" \
      --conf "spark.driver.bindAddress=$SPARK_DRIVER_BIND_ADDRESS" \
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=$SPARK_DRIVER_BIND_ADDRESS" \
      --deploy-mode client \
      "$@"
    ;;
  executor)
    shift
    for v in SPARK_DRIVER_URL SPARK_EXECUTOR_ID SPARK_EXECUTOR_CORES SPARK_EXECUTOR_MEMORY \
      SPARK_APPLICATION_ID SPARK_EXECUTOR_POD_IP; do
      [ -n "${!v:-}" ] || die "executor needs $v (the driver sets it when it creates the executor pod)"
    done
    # spark.executor.extraJavaOptions and Spark's own start-up settings, one option per variable,
    # numbered from 0 in the order they must apply (a later option wins): read them in that order
    java_opts=()
    i=0
    while v="SPARK_JAVA_OPT_$i" && [ -n "${!v+set}" ]; do
      java_opts+=("${!v}")
      i=$((i + 1))
    done
    exec /usr/bin/tini -s -- "$java" \
      ${java_opts[@]+"${java_opts[@]}"} \
      -Xms"$SPARK_EXECUTOR_MEMORY" -Xmx"$SPARK_EXECUTOR_MEMORY" \
      -cp "$(executor_classpath)" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "$SPARK_DRIVER_URL" \
      --executor-id "$SPARK_EXECUTOR_ID" \
      --cores "$SPARK_EXECUTOR_CORES" \
      --app-id "$SPARK_APPLICATION_ID" \
      --hostname "$SPARK_EXECUTOR_POD_IP" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
      --podName "${SPARK_EXECUTOR_POD_NAME:-$HOSTNAME}"
    ;;
  "")
    die "no command: Spark on Kubernetes passes 'driver ...' or 'executor'; or give one to run (bash, python -c ...)"
    ;;
  *)
    exec /usr/bin/tini -s -- "$@"
    ;;
esac
