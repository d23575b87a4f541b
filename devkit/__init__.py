"""The checkout's local kit, outside the runtime package: what the demo, the tests and the bench start.

Real services started from registry packages (an embedded Kafka broker or 3-node cluster, SASL_SSL
users and certificates, the Apicurio schema registry, an S3 API server), sample data, the demo
(`make demo` = `python -m devkit.demo`), and where the checkout's cache keeps their jars
(`devkit.paths`). Never shipped to a cluster: the wheel holds `app` only.
"""
