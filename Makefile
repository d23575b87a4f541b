# Sharelake: everything a fresh machine needs is installed by these targets, under .cache/.
#   make demo   set up, then run the demo (embedded broker, sample data, ingest, table summary)
#   make test   set up, then lint and run the test suite (what .ci/run calls)

PYTHON ?= $(shell command -v python3.11 || command -v python3)
CACHE  := .cache
VENV   := $(CACHE)/venv
MVN    := mvn -q -B -Dmaven.repo.local=$(abspath $(CACHE))/m2
PYTEST_ARGS ?=
# the oldest Kafka broker Sharelake supports, resolved beside the current one for the floor test
KAFKA_FLOOR := 4.2.2

.PHONY: setup jars s3 yarn prometheus demo test lint pytest clean chaos
setup: $(VENV)/.installed jars $(CACHE)/cds/.built

jars: $(CACHE)/jars/kafka/.resolved $(CACHE)/jars/kafka-floor/.resolved-$(KAFKA_FLOOR) $(CACHE)/jars/spark/.resolved $(CACHE)/jars/bench/.resolved $(CACHE)/registry/.resolved

# the checkout's venv: runtime, test and bench packages, and Sharelake itself installed editable (the
# `sharelake` command; no path tricks: every import of `sharelake` is the installed package's)
$(VENV)/.installed: requirements.txt requirements-dev.txt requirements-bench.txt pyproject.toml
	@$(PYTHON) -c 'import sys; v=sys.version_info[:2]; sys.exit(0 if v==(3,11) else "sharelake needs Python 3.11, found %d.%d: set PYTHON=/path/to/python3.11" % v)'
	@command -v java >/dev/null || { echo "sharelake needs Java 17: apt-get install openjdk-17-jdk-headless"; exit 1; }
	@command -v mvn >/dev/null || { echo "sharelake needs Maven: apt-get install maven"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -r requirements-dev.txt -r requirements-bench.txt
	rm -rf sharelake.egg-info  # an install's metadata from before the package moved into app/ (its old entry points)
	$(VENV)/bin/pip install -q --no-deps -e .
	@touch $@

# The wheel (app/sharelake/ only) and the runtime environment a cluster runs: a venv with requirements.txt and
# the wheel, nothing of the tests or the bench. `make runtime-pack` packs it for YARN (spark.archives).
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
WHEEL = $(CACHE)/dist/sharelake-$(VERSION)-py3-none-any.whl
RUNTIME := $(CACHE)/runtime
.PHONY: dist runtime-env runtime-pack
dist: $(WHEEL)
$(WHEEL): $(VENV)/.installed pyproject.toml requirements.txt $(shell find app -name '*.py' -o -name '*.properties' -o -name '*.lock')
	rm -f $(CACHE)/dist/sharelake-*.whl
	$(VENV)/bin/pip wheel -q --no-deps -w $(CACHE)/dist .
	rm -rf build
	@test -f $@

runtime-env: $(RUNTIME)/.installed
$(RUNTIME)/.installed: $(WHEEL)
	rm -rf $(RUNTIME)
	$(PYTHON) -m venv $(RUNTIME)
	$(RUNTIME)/bin/pip install -q --upgrade pip
	$(RUNTIME)/bin/pip install -q -r requirements.txt
	$(RUNTIME)/bin/pip install -q --no-deps $(WHEEL)
	@touch $@

# A user's test environment: the wheel with its testing kit (`sharelake[testing]`) in a venv of its
# own, nothing of the checkout; tests/test_testing_kit.py runs docs/examples/testing/ with it
TESTING_ENV := $(CACHE)/testing-env
.PHONY: testing-env
testing-env: $(TESTING_ENV)/.installed
$(TESTING_ENV)/.installed: $(WHEEL)
	rm -rf $(TESTING_ENV)
	$(PYTHON) -m venv $(TESTING_ENV)
	$(TESTING_ENV)/bin/pip install -q --upgrade pip
	$(TESTING_ENV)/bin/pip install -q "$(abspath $(WHEEL))[testing]"
	@touch $@

# Apache Airflow 3 (requirements-airflow.txt: every package pinned) in a venv of its own, never the
# checkout's (Airflow pins its own SQLAlchemy, pandas, ...): tests/test_airflow.py runs the example DAG
# (docs/examples/airflow/sharelake_dag.py) with `airflow dags test` from it
AIRFLOW_ENV := $(CACHE)/airflow-env
.PHONY: airflow-env
airflow-env: $(AIRFLOW_ENV)/.installed
$(AIRFLOW_ENV)/.installed: requirements-airflow.txt
	rm -rf $(AIRFLOW_ENV)
	$(PYTHON) -m venv $(AIRFLOW_ENV)
	$(AIRFLOW_ENV)/bin/pip install -q --upgrade pip
	$(AIRFLOW_ENV)/bin/pip install -q -r requirements-airflow.txt
	$(AIRFLOW_ENV)/bin/pip check -q
	@touch $@

runtime-pack: $(CACHE)/dist/sharelake-runtime.tar.gz
# without pyspark's jars (456 MB): a YARN container's JVM takes Spark's jars from what spark-submit
# uploads (or spark.yarn.archive); the Python side needs only pyspark's modules (151 MB, not 596 MB)
$(CACHE)/dist/sharelake-runtime.tar.gz: $(RUNTIME)/.installed
	$(VENV)/bin/venv-pack -q -f -p $(RUNTIME) --exclude 'lib/python3.11/site-packages/pyspark/jars/*' -o $@

# The Kubernetes image (the top-level Dockerfile, for `./spark-submit.sh --profile k8s`): Java 17,
# Python 3.11, /opt/venv with requirements.txt and the wheel, Delta's and S3A's jars in pyspark's jars
# folder. Built here with podman on a Debian bookworm base made by debootstrap (devkit/k8s/image.sh;
# the base is cached under ~/.cache/sharelake/k8s/image/) as localhost/sharelake:<version>.
# The cluster loads it into the kubelet's containerd (devkit.k8s.cluster: once per build of it).
# `make image-check` checks it with podman alone (devkit/k8s/image_check.sh): imports, a local Delta
# job as uid 185 and as root, the entrypoint's driver and executor branches, SIGTERM to the driver.
.PHONY: image image-check
image: $(WHEEL) $(CACHE)/jars/spark/.resolved $(CACHE)/jars/s3/.resolved
	devkit/k8s/image.sh build

image-check:
	devkit/k8s/image_check.sh

# the driver JVM's class-data-sharing archive (app/sharelake/run/class_archive.py): a training run writes the
# classes the write path loads; every later driver maps them instead of loading them (seconds off each start)
$(CACHE)/cds/.built: $(VENV)/.installed $(CACHE)/jars/spark/.resolved app/sharelake/run/class_archive.py app/sharelake/run/class_archive_build.py
	SHARELAKE_JARS=$(abspath $(CACHE))/jars/spark SHARELAKE_CLASS_ARCHIVES=$(abspath $(CACHE))/cds $(VENV)/bin/python -m sharelake.run.class_archive_build
	@if ls $(CACHE)/cds/*.jsa >/dev/null 2>&1; then touch $@; fi

# Kafka broker + tools, for the embedded broker (its own JVM classpath)
$(CACHE)/jars/kafka/.resolved: conf/maven/kafka-broker.pom.xml
	rm -rf $(CACHE)/jars/kafka
	$(MVN) -f $< dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(abspath $(CACHE))/jars/kafka
	@touch $@

# The oldest broker Sharelake supports (share groups are production-ready from Kafka 4.2): the same
# pom at the newest 4.2.x (KAFKA_FLOOR, above), for the floor test (tests/test_broker_floor.py)
$(CACHE)/jars/kafka-floor/.resolved-$(KAFKA_FLOOR): conf/maven/kafka-broker.pom.xml
	rm -rf $(CACHE)/jars/kafka-floor
	$(MVN) -f $< dependency:copy-dependencies -Dkafka.version=$(KAFKA_FLOOR) -DincludeScope=runtime -DoutputDirectory=$(abspath $(CACHE))/jars/kafka-floor
	@touch $@

# Delta Lake for Spark 4.2, spark-avro and the Kafka Java client (its Admin: share-group state): only
# those artifacts; Spark's own jars already hold the rest (kafka-clients' codecs and SLF4J included)
$(CACHE)/jars/spark/.resolved: conf/maven/spark-jars.pom.xml
	rm -rf $(CACHE)/jars/spark
	$(MVN) -f $< dependency:copy-dependencies -DincludeScope=runtime -DincludeGroupIds=io.delta,org.apache.spark,org.apache.kafka -DexcludeArtifactIds=spark-tags_2.13 -DoutputDirectory=$(abspath $(CACHE))/jars/spark
	@touch $@

# Apicurio Registry (the whole distribution, one tar.gz from Maven Central), for the embedded schema registry
$(CACHE)/registry/.resolved: conf/maven/schema-registry.pom.xml
	rm -rf $(CACHE)/registry
	$(MVN) -f $< dependency:unpack -Dregistry.dir=$(abspath $(CACHE))/registry
	@touch $@

# Delta tables on S3: the S3A connector and the AWS SDK's S3 modules (Spark's classpath), and an S3
# API server for the tests (S3Proxy). Only when S3 is used or tested: `make test` needs it.
s3: $(CACHE)/jars/s3/.resolved $(CACHE)/jars/s3-server/.resolved

$(CACHE)/jars/s3/.resolved: conf/maven/s3-jars.pom.xml
	rm -rf $(CACHE)/jars/s3
	$(MVN) -f $< dependency:copy-dependencies -DincludeScope=runtime -DexcludeGroupIds=io.netty,org.apache.httpcomponents,commons-codec,commons-logging,org.slf4j -DoutputDirectory=$(abspath $(CACHE))/jars/s3
	@touch $@

$(CACHE)/jars/s3-server/.resolved: conf/maven/s3-server.pom.xml
	rm -rf $(CACHE)/jars/s3-server
	$(MVN) -f $< dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(abspath $(CACHE))/jars/s3-server
	@touch $@

# A real YARN cluster and HDFS for the YARN tests (tests/test_yarn.py, devkit/yarn_cluster.py): Hadoop's
# mini clusters and their class path, from Maven Central into .cache/jars/yarn/.
yarn: $(CACHE)/jars/yarn/.resolved

$(CACHE)/jars/yarn/.resolved: conf/maven/yarn-cluster.pom.xml
	rm -rf $(CACHE)/jars/yarn
	$(MVN) -f $< dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(abspath $(CACHE))/jars/yarn
	@touch $@

# A real Prometheus (server and promtool) for the monitoring tests (tests/test_monitoring.py): Debian's
# `prometheus` package, unpacked under .cache/prometheus/ without installing it (no root needed once
# the package lists are there). Grafana is in no registry this project uses: its dashboard is checked
# through Prometheus, query by query.
prometheus: $(CACHE)/prometheus/.installed

$(CACHE)/prometheus/.installed:
	rm -rf $(CACHE)/prometheus && mkdir -p $(CACHE)/prometheus/deb
	cd $(CACHE)/prometheus/deb && { apt-get download prometheus 2>/dev/null || { apt-get update -qq && apt-get download prometheus; }; }
	dpkg-deb -x $(CACHE)/prometheus/deb/prometheus_*.deb $(CACHE)/prometheus
	$(CACHE)/prometheus/usr/bin/promtool --version >/dev/null
	@touch $@

# A real one-node Kubernetes (devkit/k8s/): `make k8s` builds its binaries once per machine from the Go
# module proxy (Kubernetes, etcd, CoreDNS) and Debian's packages (containerd, runc, the CNI plugins),
# cached outside the checkout in K8S_CACHE, builds Sharelake's image from the Dockerfile, and starts
# the cluster (KUBECONFIG=/var/lib/sharelake-k8s/admin.kubeconfig); `make k8s-stop` stops it and
# removes its pods, mounts, bridge and iptables chains. Needs root.
K8S_CACHE ?= $(HOME)/.cache/sharelake/k8s
export SHARELAKE_K8S_CACHE := $(K8S_CACHE)
.PHONY: k8s k8s-build k8s-stop
k8s-build:
	devkit/k8s/build.sh

k8s: k8s-build image setup
	$(VENV)/bin/python -m devkit.k8s.cluster start --image localhost/sharelake:$(VERSION)

# The Kubernetes tests' image, when this machine has the cluster built: CI never builds the cluster
# cold (tests/test_kubernetes.py is skipped then, with one line); `make chaos` builds it (`make k8s`)
.PHONY: k8s-test-image
k8s-test-image:
	@if $(VENV)/bin/python -c 'import sys; from devkit.k8s.cluster import built; sys.exit(not built())'; then \
	  $(MAKE) --no-print-directory image; \
	else echo "[k8s] no Kubernetes built in $(K8S_CACHE): the Kubernetes tests are skipped (make k8s builds it once)"; fi

k8s-stop: $(VENV)/.installed
	$(VENV)/bin/python -m devkit.k8s.cluster stop

# the demo fetches only what it runs: the venv, the broker's jars, Delta's, the registry (not the
# bench's or the floor broker's jars, which `make setup` and `make test` add)
demo: $(VENV)/.installed $(CACHE)/jars/kafka/.resolved $(CACHE)/jars/spark/.resolved $(CACHE)/registry/.resolved
	$(VENV)/bin/python -m devkit.demo

lint: setup
	$(VENV)/bin/ruff check app jobs tests bench devkit
	$(VENV)/bin/ruff format --check app jobs tests bench devkit
	$(VENV)/bin/mypy app jobs bench devkit

# two workers (pytest-xdist), a module's tests all on one of them (its module fixtures, its cluster):
# much of a test is waiting (a lock expiring, a driver starting, a job idling out), which the other
# worker fills. PYTEST_WORKERS=0 runs the suite in this process, one test after the other.
PYTEST_WORKERS ?= 2
pytest: setup s3 runtime-env runtime-pack testing-env yarn prometheus airflow-env k8s-test-image
	$(VENV)/bin/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

test: lint pytest

# the fault tests at full size (tens of minutes): the kill loop with 10 kills over 100,000 records, the
# long network-fault variants (`long`: a commit made while cut off, a slow link for 3 minutes and 20
# short cuts); `make test` and CI run the bounded forms. The figures each prints go to the log.
CHAOS_LOG ?= $(CACHE)/chaos.log
chaos: setup s3 runtime-pack yarn k8s
	SHARELAKE_LONG=1 SHARELAKE_CHAOS_KILLS=10 SHARELAKE_CHAOS_RECORDS=100000 SHARELAKE_NET_SLOW_S=180 \
	  SHARELAKE_NET_SHORT_CUTS=20 $(VENV)/bin/python -m pytest -m "chaos or long" -s $(PYTEST_ARGS) \
	  >$(CHAOS_LOG) 2>&1; rc=$$?; tail -n 40 $(CHAOS_LOG); echo "[chaos] the whole log: $(CHAOS_LOG)"; exit $$rc

clean:
	rm -rf $(CACHE)

# --- benchmark (bench/): Sharelake against Spark's Kafka source, a plain ShareConsumer drain and
# Kafka's share-consumer perf tool, side by side in one run; report under bench/results/.
#   make bench         the full run (BENCH_ARGS to change sizes: see `python -m bench run --help`; every
#                      scenario: `python -m bench --help`)
#   make bench-smoke   a tiny run that only checks the harness works (numbers mean nothing)
#   make bench-storage local vs S3 tables, auto compaction, optimized writes, jobs/maintain.py (bench/storage.py)
BENCH_ARGS ?=
BENCH_JAR_IDS := spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2

.PHONY: bench bench-smoke bench-setup bench-storage
bench-setup: setup

# Spark's built-in Kafka source: only the artifacts the pyspark wheel does not already ship
$(CACHE)/jars/bench/.resolved: conf/maven/bench-jars.pom.xml
	rm -rf $(CACHE)/jars/bench
	$(MVN) -f $< dependency:copy-dependencies -DincludeScope=runtime -DincludeArtifactIds=$(BENCH_JAR_IDS) -DoutputDirectory=$(abspath $(CACHE))/jars/bench
	@touch $@

bench: bench-setup
	$(VENV)/bin/python -m bench run $(BENCH_ARGS)

bench-smoke: bench-setup
	$(VENV)/bin/python -m bench run --smoke $(BENCH_ARGS)

bench-storage: setup s3
	$(VENV)/bin/python -m bench storage $(BENCH_ARGS)
