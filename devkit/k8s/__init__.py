"""A real one-node Kubernetes on this machine, for the Kubernetes tests and `make k8s`.

`build.sh` builds its binaries and system images once per machine (outside the checkout);
`cluster.K8sCluster` starts and stops it; `pki` makes its certificates and kubeconfigs; `network`
owns the pod network (the bridge, the sysctls, the iptables chains); `leftovers` removes what a
killed run left.
"""
