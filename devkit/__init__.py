"""The checkout's local kit, outside the runtime package: what the demo, the tests and the bench start.

Real services started from registry packages (an embedded Kafka broker or 3-node cluster, SASL_SSL
users and certificates, the Apicurio schema registry, an S3 API server), sample data, the demo
(`make demo` = `python -m devkit.demo`), and where the checkout's cache keeps their jars
(`devkit.paths`). Never shipped to a cluster: the wheel holds the `sharelake` package only.

The embedded broker and registry live in the wheel's testing kit (`sharelake.testing`); a checkout runs
them on the jars `make jars` resolved, not the kit's own fetch, through the two variables set here.
"""

import os

from devkit.paths import KAFKA_JARS, REGISTRY_DIR

os.environ.setdefault("SHARELAKE_KAFKA_JARS", str(KAFKA_JARS))
os.environ.setdefault("SHARELAKE_REGISTRY_DIR", str(REGISTRY_DIR))
