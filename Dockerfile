# Sharelake's Spark image for Kubernetes (`./spark-submit.sh --profile k8s`): the driver and the
# executors both run it. Java 17, Python 3.11, a venv at /opt/venv with the pinned runtime packages
# (requirements.txt) and Sharelake's wheel, Delta's jars and the job's other jars in pyspark's jars
# folder (SPARK_HOME), tini and an entrypoint that speaks Spark on Kubernetes' container contract.
#
# Build it from the checkout with any builder (docker, podman, buildah) once the wheel and the jars
# are there:
#   make dist jars s3
#   docker build -t registry.example.com/sharelake:0.21.0 .
#   (make image: podman, with a base made from Debian's packages; devkit/k8s/image.sh)
# BASE: any Debian bookworm image (Java 17 and Python 3.11 come from bookworm's packages).
#
# The layers go from the least to the most often changed: the system packages, the pinned venv,
# the jars, the entrypoint and jobs/, and last the wheel, so a commit that only changes app/
# rebuilds (and pushes) only the wheel's small layer.
ARG BASE=debian:bookworm-slim
FROM ${BASE}

ARG DEBIAN_FRONTEND=noninteractive
# Spark's images run as uid 185; tables on a mounted volume must be writable by it (see below)
ARG SPARK_UID=185

# Java 17 (headless JRE), Python 3.11 with venv, tini, bash (Spark's scripts); JAVA_HOME is a fixed
# path whatever the architecture. (The JRE's postinst links its man page into /usr/share/man/man1,
# which -slim bases lack: made first.)
RUN set -eux; \
    mkdir -p /usr/share/man/man1; \
    apt-get update; \
    apt-get install -y --no-install-recommends \
        openjdk-17-jre-headless python3.11 python3.11-venv tini bash procps; \
    ln -s "$(dirname "$(dirname "$(readlink -f /usr/bin/java)")")" /usr/lib/jvm/java-17; \
    apt-get clean; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old /var/log/apt /var/log/dpkg.log \
        /usr/share/man/*; \
    find /usr/share/doc -type f ! -name copyright -delete; \
    groupadd --system --gid "$SPARK_UID" spark; \
    useradd --system --uid "$SPARK_UID" --gid spark --home-dir /opt/sharelake/work-dir --shell /bin/bash spark; \
    mkdir -p /opt/sharelake/work-dir; \
    chown "$SPARK_UID:0" /opt/sharelake/work-dir; \
    chmod 0775 /opt/sharelake/work-dir

ENV JAVA_HOME=/usr/lib/jvm/java-17 \
    SPARK_HOME=/opt/venv/lib/python3.11/site-packages/pyspark \
    PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYSPARK_PYTHON=/opt/venv/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/venv/bin/python \
    LANG=C.UTF-8

# The pinned runtime packages (pyspark, delta-spark, confluent-kafka, ...), nothing of the tests.
# The test suites of pandas, numpy and pyarrow go (60 MB). Behind a TLS-intercepting proxy, pass its CA bundle as a build secret (optional):
#   docker build --secret id=pip_ca,src=/etc/ssl/certs/ca-certificates.crt ...
COPY requirements.txt /tmp/requirements.txt
RUN --mount=type=secret,id=pip_ca,required=false \
    set -eux; \
    if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi; \
    python3.11 -m venv /opt/venv; \
    /opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check -r /tmp/requirements.txt; \
    rm /tmp/requirements.txt; \
    site=/opt/venv/lib/python3.11/site-packages; \
    rm -rf "$site"/pandas/tests "$site"/pyarrow/tests; \
    find "$site"/numpy -depth -type d -name tests -exec rm -rf {} +

# Delta's jars, spark-avro, the Kafka Java client (`make jars`: .cache/jars/spark/) and the S3A
# connector (`make s3`: .cache/jars/s3/), in pyspark's jars folder: on the class path of spark-submit
# (the driver) and of the executors (the entrypoint's $SPARK_HOME/jars/*), so no --jars is needed
COPY .cache/jars/spark/*.jar .cache/jars/s3/*.jar /opt/venv/lib/python3.11/site-packages/pyspark/jars/

# The entrypoint and the jobs' scripts (spark-submit ... local:///opt/sharelake/jobs/main.py)
COPY devkit/k8s/entrypoint.sh /opt/sharelake/entrypoint.sh
COPY jobs/*.py /opt/sharelake/jobs/

# Sharelake itself (`make dist`: .cache/dist/sharelake-*.whl), its dependencies already pinned above
COPY .cache/dist/sharelake-*.whl /tmp/dist/
RUN set -eux; \
    /opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check --no-deps /tmp/dist/sharelake-*.whl; \
    /opt/venv/bin/pip check --disable-pip-version-check; \
    rm -rf /tmp/dist

# The working directory is where the driver downloads what spark-submit ships (--files: the
# --config file) and what the executors fetch; writable by uid SPARK_UID and by group 0.
# Tables on a hostPath or PVC volume must be writable by uid 185 (chown 185 the host folder, or
# fsGroup: 185 in the pod's securityContext); or run the pods as root (runAsUser: 0): the image
# works as either.
WORKDIR /opt/sharelake/work-dir
USER ${SPARK_UID}
ENTRYPOINT ["/opt/sharelake/entrypoint.sh"]
