#!/usr/bin/env bash
# Checks the Kubernetes image (`make image`) with podman alone, no cluster: `make image-check`.
#
#   1. the venv's Python imports Sharelake, pyspark, delta and confluent_kafka;
#   2. `spark-submit --master local[1]` writes and reads a Delta table on a mounted volume, as the
#      image's uid 185 (the volume's folder owned by 185) and as root (a root-owned folder): Delta's
#      jars and the venv's Python (the Python worker's interpreter is printed) are wired;
#   3. Spark on Kubernetes' contract, played by hand: a standalone master, the entrypoint's `driver`
#      branch (spark-submit --deploy-mode client bound to SPARK_DRIVER_BIND_ADDRESS), and its
#      `executor` branch given the environment Spark's driver would give an executor pod (the driver
#      URL, the app id, spark.executor.extraJavaOptions as SPARK_JAVA_OPT_*): the executor registers
#      with the driver, writes a Delta table and runs the driver's Python in its Python workers;
#   4. `podman stop` (SIGTERM, as a pod's deletion) reaches the driver JVM through tini: its shutdown
#      hooks run (Sharelake's drain hook is one of them) and it exits 143.
#
# What it owns: containers named sharelake-check-* (removed at the end) and a temporary folder.
# Needs root (podman's rootful store). Settings: SHARELAKE_IMAGE (default localhost/sharelake:<version>),
# SHARELAKE_CHECK_PORT (default 17077: the master's port; the driver's is the next one).
set -euo pipefail
trap 'rc=$?; echo "sharelake: devkit/k8s/image_check.sh failed (exit $rc) at line $LINENO: $BASH_COMMAND" >&2' ERR

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/pyproject.toml")"
image="${SHARELAKE_IMAGE:-localhost/sharelake:$version}"
port="${SHARELAKE_CHECK_PORT:-17077}"
driver_port=$((port + 1))
# this machine's podman cannot raise a container's limits to its own hard limits: below them
run=(podman run --network host --ulimit nofile=16384:16384 --ulimit nproc=16384:16384)
work="$(mktemp -d /tmp/sharelake-image-check.XXXXXX)"
names=(sharelake-check-master sharelake-check-driver sharelake-check-exec-1)
cleanup() {
  podman rm -f --ignore "${names[@]}" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
say() { echo "[image-check] $*"; }
# a container's log in a file (grep -q on a pipe would fail the pipe under pipefail when it stops early)
logs() { podman logs "$1" >"$work/$1.log" 2>&1 || true; echo "$work/$1.log"; }
fail() { echo "sharelake: image check failed: $*" >&2; exit 1; }
podman image exists "$image" || fail "no image $image: run 'make image' first"
for p in "$port" "$driver_port"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then fail "port $p is in use: set SHARELAKE_CHECK_PORT"; fi
done

cat >"$work/delta_local.py" <<'EOF'
import os, sys
from pyspark.sql import SparkSession

spark = (SparkSession.builder.appName("image-check-local")
         .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
         .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
         .getOrCreate())
path = sys.argv[1]
spark.range(10).selectExpr("id", "id * 2 AS twice").write.format("delta").mode("overwrite").save(path)
back = spark.read.format("delta").load(path)
worker = back.rdd.mapPartitions(lambda _: [sys.executable]).collect()[0]
version = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").first()["version"]
print(f"CHECK rows={back.count()} sum={back.agg({'twice': 'sum'}).first()[0]} delta_version={version} "
      f"worker_python={worker} uid={os.getuid()}", flush=True)
spark.stop()
EOF

cat >"$work/contract.py" <<'EOF'
import os, sys, time
from pyspark.sql import SparkSession

out = sys.argv[1]
spark = (SparkSession.builder.appName("image-check-contract")
         .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
         .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
         .getOrCreate())
sc = spark.sparkContext
# what Spark's Kubernetes backend puts in an executor pod's environment: the app id, and
# spark.executor.extraJavaOptions (where Spark adds Java 17's module options) as SPARK_JAVA_OPT_*
with open(f"{out}/executor-env.part", "w") as f:
    f.write(sc.applicationId + "\n" + sc.getConf().get("spark.executor.extraJavaOptions", ""))
os.rename(f"{out}/executor-env.part", f"{out}/executor-env")
deadline = time.time() + 300
while sc._jsc.sc().getExecutorIds().size() < 1:
    if time.time() > deadline:
        sys.exit("no executor registered within 300 s")
    time.sleep(1)
spark.range(0, 1000, numPartitions=4).write.format("delta").mode("overwrite").save(f"{out}/tables/contract")
back = spark.read.format("delta").load(f"{out}/tables/contract")


def where(_rows):  # in a Python worker of the executor holding the partition
    yield f"{os.environ.get('SPARK_EXECUTOR_POD_NAME')}:{sys.executable}"


ran_on = sorted(set(back.rdd.mapPartitions(where).collect()))
print(f"CHECK executors={sc._jsc.sc().getExecutorIds().mkString(',')} rows={back.count()} ran_on={ran_on}", flush=True)
# a streaming query keeps the driver busy until the SIGTERM
query = (spark.readStream.format("rate").option("rowsPerSecond", 5).load()
         .writeStream.format("delta").option("checkpointLocation", f"{out}/tables/stream-checkpoint")
         .trigger(processingTime="2 seconds").start(f"{out}/tables/stream"))
print("CHECK streaming", flush=True)
query.awaitTermination()
EOF

mkdir -p "$work/as-spark" "$work/as-root"
chown -R 185:185 "$work/as-spark" "$work"/*.py
chmod 0755 "$work"

# 1. imports
start=$SECONDS
"${run[@]}" --rm "$image" /opt/venv/bin/python -c \
  'import sharelake, pyspark, delta, confluent_kafka, sys; print("CHECK imports", sys.executable, "pyspark", pyspark.__version__, "confluent-kafka", confluent_kafka.version(), "sharelake", sharelake.__file__)' \
  | grep '^CHECK' || fail "imports"

# 2. a local Delta job, as uid 185 and as root
for who in spark root; do
  user=(); [ "$who" = root ] && user=(--user 0)
  out="$("${run[@]}" --rm ${user[@]+"${user[@]}"} -v "$work:/check" "$image" \
    spark-submit --master 'local[1]' /check/delta_local.py "/check/as-$who/table" 2>"$work/local-$who.log" || true)"
  echo "$out" | grep '^CHECK' || { tail -n 30 "$work/local-$who.log" >&2; fail "local Delta job as $who"; }
  echo "$out" | grep -q 'rows=10 sum=90 delta_version=0 worker_python=/opt/venv/bin/python' || fail "local Delta job as $who: wrong result"
done

# 3. the driver and executor branches, with a standalone master standing in for Kubernetes
"${run[@]}" -d --name sharelake-check-master "$image" spark-class org.apache.spark.deploy.master.Master \
  --host 127.0.0.1 --port "$port" --webui-port 0 >/dev/null
mkdir -p "$work/contract/tables" && chown -R 185:185 "$work/contract"
"${run[@]}" -d --name sharelake-check-driver -v "$work/contract:/contract" -v "$work:/check:ro" \
  -e SPARK_DRIVER_BIND_ADDRESS=127.0.0.1 "$image" \
  driver --master "spark://127.0.0.1:$port" --conf spark.driver.host=127.0.0.1 \
  --conf "spark.driver.port=$driver_port" --conf spark.cores.max=1 --name image-check /check/contract.py /contract >/dev/null
for _ in $(seq 1 300); do [ -f "$work/contract/executor-env" ] && break; sleep 1; done
[ -f "$work/contract/executor-env" ] || { tail -n 30 "$(logs sharelake-check-driver)" >&2; fail "driver did not start"; }
grep -q "Successfully started service 'sparkDriver' on port $driver_port" "$(logs sharelake-check-driver)" \
  || fail "the driver is not on port $driver_port"
app_id="$(head -n 1 "$work/contract/executor-env")"
env_args=()
n=0
while IFS= read -r opt; do
  env_args+=(-e "SPARK_JAVA_OPT_$n=$opt")
  n=$((n + 1))
done < <(tail -n +2 "$work/contract/executor-env" | python3 -c 'import shlex, sys; print("\n".join(shlex.split(sys.stdin.read())))')
env_args+=(-e "SPARK_JAVA_OPT_$n=-Dspark.driver.port=$driver_port")
"${run[@]}" -d --name sharelake-check-exec-1 -v "$work/contract:/contract" \
  -e "SPARK_DRIVER_URL=spark://CoarseGrainedScheduler@127.0.0.1:$driver_port" -e SPARK_EXECUTOR_ID=1 \
  -e SPARK_EXECUTOR_CORES=1 -e SPARK_EXECUTOR_MEMORY=1g -e "SPARK_APPLICATION_ID=$app_id" \
  -e SPARK_EXECUTOR_POD_IP=127.0.0.1 -e SPARK_EXECUTOR_POD_NAME=sharelake-check-exec-1 \
  -e SPARK_RESOURCE_PROFILE_ID=0 "${env_args[@]}" "$image" executor >/dev/null
for _ in $(seq 1 600); do
  grep -q '^CHECK streaming' "$(logs sharelake-check-driver)" && break
  [ "$(podman inspect -f '{{.State.Running}}' sharelake-check-driver)" = true ] || break
  sleep 1
done
driver_log="$(logs sharelake-check-driver)"
grep '^CHECK executors' "$driver_log" || { tail -n 40 "$driver_log" >&2; fail "the executor branch"; }
grep -qF "ran_on=['sharelake-check-exec-1:/opt/venv/bin/python']" "$driver_log" \
  || fail "the driver's Python did not run in the executor's /opt/venv/bin/python"
grep -m1 'KubernetesExecutorBackend: Started daemon' "$(logs sharelake-check-exec-1)" | sed 's/^/CHECK executor: /'

# 4. SIGTERM to the driver's container reaches its JVM
sleep 5
stop_start=$SECONDS
podman stop -t 120 sharelake-check-driver >/dev/null
stop_s=$((SECONDS - stop_start))
rc="$(podman inspect -f '{{.State.ExitCode}}' sharelake-check-driver)"
hooks="$(grep -cE 'Invoking stop\(\) from shutdown hook|Shutdown hook called' "$(logs sharelake-check-driver)" || true)"
echo "CHECK driver stopped by SIGTERM in $stop_s s: exit $rc, shutdown-hook lines $hooks"
[ "$rc" = 143 ] && [ "$hooks" -gt 0 ] || { tail -n 30 "$work/sharelake-check-driver.log" >&2; fail "SIGTERM did not stop the driver JVM through its shutdown hooks"; }
say "all checks passed in $((SECONDS - start)) s ($image)"
