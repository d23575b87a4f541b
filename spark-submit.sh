#!/usr/bin/env bash
# Submit a Sharelake job from this checkout: its venv's spark-submit, the Delta jars, the profile's properties.
#
#   ./spark-submit.sh [--profile local|standalone|yarn|k8s] [--master URL] [--deploy-mode client|cluster]
#                     [--conf KEY=VALUE ...] [--dry-run] jobs/main.py ingest --config conf/local.toml [args]
#
# --profile picks the target (default local): it reads conf/spark/<profile>.properties when present
# (--properties-file). The code runs from an installed Sharelake, never from this tree's files:
#   local, standalone  the venv's (SHARELAKE_VENV, default .cache/venv: Sharelake installed editable;
#                      `make runtime-env` builds .cache/runtime, the wheel and the runtime pins only);
#   yarn               the packed runtime venv (`make runtime-pack`), shipped with spark.archives;
#   k8s                the container image's (the repository's Dockerfile: requirements.txt and the wheel
#                      in /opt/venv, jobs/ in /opt/sharelake/jobs); in cluster mode the job script is the
#                      image's copy and --config names a file in the driver pod (a mounted ConfigMap).
# --master defaults to $SPARK_MASTER, else local[2] (local) or what the profile needs.
# --deploy-mode cluster (YARN, Kubernetes; Python cannot run in standalone cluster mode): on YARN it
# ships the --config file with --files and passes its base name to the job.
# --conf passes a Spark property to spark-submit (it wins over the profile's file): the cluster's sizes
# (spark.driver.memory, spark.executor.instances, ...), which must be set before the driver starts.
# --dry-run prints the full spark-submit command only.
# Run `make setup` once first (venv, pinned packages, Maven-resolved jars under .cache/); `make s3`
# adds the S3A connector (tables on s3a://), which joins the classpath when it is there.
# Every refusal or failure of this script ends with one line on stderr: `sharelake: <cause>`.
set -euo pipefail
trap 'rc=$?; echo "sharelake: spark-submit.sh failed (exit $rc) at line $LINENO: $BASH_COMMAND" >&2' ERR
root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${SHARELAKE_CACHE:-$root/.cache}"
venv="${SHARELAKE_VENV:-$cache/venv}"
profile="local"
master="${SPARK_MASTER:-}"
deploy_mode="client"
dry_run=0
confs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile="$2"; shift 2 ;;
    --master) master="$2"; shift 2 ;;
    --deploy-mode) deploy_mode="$2"; shift 2 ;;
    --conf) confs+=(--conf "$2"); shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    *) break ;;
  esac
done
if [ -n "${SPARK_REMOTE:-}" ]; then
  # Sharelake's share consumers live in the driver; under Spark Connect foreachBatch runs on the server
  echo "sharelake: SPARK_REMOTE is set (Spark Connect): foreachBatch would run on the Spark Connect server, away from the share consumers in this driver; unset it and submit to local, standalone, YARN or Kubernetes" >&2
  exit 2
fi
[ $# -ge 1 ] || { echo "usage: $0 [--profile P] [--master URL] [--deploy-mode M] [--conf K=V] [--dry-run] JOB.py [job args]" >&2; exit 2; }
case "$profile" in
  local) master="${master:-local[2]}" ;;
  standalone) [ -n "$master" ] || { echo "sharelake: --profile standalone needs --master spark://host:7077" >&2; exit 2; } ;;
  yarn) master="${master:-yarn}" ;;
  k8s) [ -n "$master" ] || { echo "sharelake: --profile k8s needs --master k8s://https://api-server:443" >&2; exit 2; } ;;
  *) echo "sharelake: unknown --profile $profile: use local, standalone, yarn or k8s" >&2; exit 2 ;;
esac
if [ "$deploy_mode" = cluster ] && [ "$profile" != yarn ] && [ "$profile" != k8s ]; then
  echo "sharelake: --deploy-mode cluster needs --profile yarn or k8s (Spark cannot run Python apps in $profile cluster mode)" >&2
  exit 2
fi
if [ ! -x "$venv/bin/spark-submit" ] || ! ls "$cache"/jars/spark/*.jar >/dev/null 2>&1; then
  echo "sharelake: not set up yet: run 'make setup' (venv, pinned packages, jars under $cache)" >&2
  exit 2
fi
archive="$cache/dist/sharelake-runtime.tar.gz"
IMAGE_JOBS=/opt/sharelake/jobs  # where the Dockerfile puts jobs/ in the image
IMAGE_SITE_PACKAGES=/opt/venv/lib/python3.11/site-packages  # and the venv holding Sharelake
if [ "$profile" = yarn ] && [ "$dry_run" = 0 ] && [ ! -f "$archive" ]; then
  echo "sharelake: --profile yarn ships the packed runtime venv $archive: run 'make runtime-pack' first" >&2
  exit 2
fi
# the S3A connector too once `make s3` fetched it (tables on s3a://; without it the job's start-up
# check names `make s3` for an s3a:// table)
shopt -s nullglob
jar_files=("$cache"/jars/spark/*.jar "$cache"/jars/s3/*.jar)
shopt -u nullglob
jars="$(IFS=,; echo "${jar_files[*]}")"
job="$1"; shift
job_args=("$@")
# the application's name is the job's run.app_name (its config with its --set overrides): in cluster mode
# YARN and Kubernetes name the application from spark-submit's --name before the driver runs, which would
# otherwise be the entry point's file name. Nothing when this machine cannot read the config (a path
# inside a Kubernetes driver pod): --conf spark.app.name then names it.
app_name="$("$venv/bin/python" -m sharelake.config.app_name "$job" ${job_args[@]+"${job_args[@]}"} 2>/dev/null || true)"

export PYSPARK_PYTHON="$venv/bin/python" PYSPARK_DRIVER_PYTHON="$venv/bin/python"
export SHARELAKE_SUBMITTED=1
# the driver JVM's class archive (app/sharelake/run/class_archive.py), when `make setup` built one for this venv
export SHARELAKE_CLASS_ARCHIVES="${SHARELAKE_CLASS_ARCHIVES-$cache/cds}"  # set empty: none
extra=()
case "$master" in
  local*)
    export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
    ;;
esac
if [ "$profile" = standalone ]; then
  # executors on the same machines as this venv (a standalone cluster started from it)
  extra+=(--conf "spark.pyspark.python=$venv/bin/python")
fi
if [ "$profile" = yarn ]; then
  # the runtime venv (requirements.txt and the wheel) unpacked as ./environment in every container
  extra+=(--conf "spark.archives=$archive#environment")
  if [ "$deploy_mode" = client ]; then
    # the driver runs here, beside this venv, not in a container with ./environment
    extra+=(--conf "spark.pyspark.driver.python=$venv/bin/python")
  fi
fi
if [ -f "$root/conf/spark/$profile.properties" ]; then
  extra+=(--properties-file "$root/conf/spark/$profile.properties")
fi
if [ "$profile" = k8s ] && [ "$deploy_mode" = client ]; then
  # the driver runs here, beside this venv; the executors run the image's /opt/venv
  extra+=(--conf "spark.pyspark.driver.python=$venv/bin/python")
fi
if [ "$profile" = k8s ] && [ "$deploy_mode" = cluster ]; then
  # the driver runs in a pod of the image: its job script is the image's copy, and the --config path is
  # one inside the pod (a ConfigMap mounted by the driver's pod template), passed as given
  job="local://$IMAGE_JOBS/$(basename "$job")"
  # the driver's logging as in client mode (app/sharelake/run/log4j2.properties, in the image's venv): Sharelake's
  # lines, not Spark's INFO flood
  extra+=(--conf "spark.driver.extraJavaOptions=-Dlog4j2.configurationFile=file:$IMAGE_SITE_PACKAGES/sharelake/run/log4j2.properties")
elif [ "$deploy_mode" = cluster ]; then
  # the driver runs in the cluster: ship the config file and pass its name
  for i in "${!job_args[@]}"; do
    if [ "${job_args[$i]}" = --config ] && [ $((i + 1)) -lt ${#job_args[@]} ]; then
      extra+=(--files "${job_args[$((i + 1))]}")
      job_args[i+1]="$(basename "${job_args[$((i + 1))]}")"
    fi
  done
fi
if [ "$deploy_mode" = client ]; then
  # Sharelake's Spark settings live in app/sharelake/run/spark_session.py, for this script and the `sharelake`
  # command alike: the job's session sets them; only the driver JVM's own options are needed here
  launch=()
  while IFS= read -r arg; do launch+=("$arg"); done < <("$venv/bin/python" -m sharelake.run.spark_session --submit-args)
  extra+=(${launch[@]+"${launch[@]}"})
fi
jar_args=(--jars "$jars")
if [ "$profile" = k8s ] && [ "$deploy_mode" = cluster ]; then
  jar_args=()  # the image holds them (pyspark's jars folder); this machine's would need an upload path
fi
name_args=()
[ -z "$app_name" ] || name_args=(--name "$app_name")
cmd=("$venv/bin/spark-submit" --master "$master" --deploy-mode "$deploy_mode" ${name_args[@]+"${name_args[@]}"}
  ${jar_args[@]+"${jar_args[@]}"} ${extra[@]+"${extra[@]}"} ${confs[@]+"${confs[@]}"}
  "$job" ${job_args[@]+"${job_args[@]}"})
if [ "$dry_run" = 1 ]; then
  printf '%q ' "${cmd[@]}"; echo
  exit 0
fi
exec "${cmd[@]}"
