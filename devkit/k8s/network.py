"""The pod network of the one-node cluster: a bridge of the project's own, its address range, the
two sysctls a bridge network with Services needs, and the CNI configuration the kubelet's
containerd reads.

Pods get addresses from `POD_CIDR` on the bridge `BRIDGE` (the CNI `bridge` plugin with
`host-local` addresses); the host is the bridge's first address (`NODE_IP`), where the API server,
the kubelet and whatever the pods must reach (a broker, an S3 server) listen. Services take
`SERVICE_CIDR`, addresses only kube-proxy's iptables rules know. Nothing is routed off the
machine: no masquerade, no route but the bridge's own.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

BRIDGE = "slk8s0"
POD_CIDR = "10.214.0.0/24"
NODE_IP = "10.214.0.1"  # the host on the bridge
SERVICE_CIDR = "10.215.0.0/24"
API_SERVICE_IP = "10.215.0.1"  # the `kubernetes` service
DNS_SERVICE_IP = "10.215.0.10"  # CoreDNS
CNI_NETWORK = "sharelake-pods"
CNI_BIN = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
# ip_forward: a Service's address is DNATed to a pod and forwarded back onto the bridge;
# bridge-nf-call-iptables: a reply crossing the bridge between two pods passes conntrack, which un-NATs it
SYSCTLS = {"net/ipv4/ip_forward": "1", "net/bridge/bridge-nf-call-iptables": "1"}


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=check, capture_output=True, text=True)


def set_sysctls(saved: Path) -> None:
    """Set `SYSCTLS`, writing the values they had to `saved` once (a leftover run's file is kept)."""
    before = {}
    for key, value in SYSCTLS.items():
        proc = Path("/proc/sys") / key
        before[key] = proc.read_text().strip()
        proc.write_text(value)
    if not saved.exists():
        saved.write_text(json.dumps(before))


def restore_sysctls(saved: Path) -> None:
    if not saved.exists():
        return
    for key, value in json.loads(saved.read_text()).items():
        (Path("/proc/sys") / key).write_text(value)
    saved.unlink()


def create_bridge() -> None:
    sh("ip", "link", "add", BRIDGE, "type", "bridge")
    sh("ip", "addr", "add", f"{NODE_IP}/{POD_CIDR.split('/')[1]}", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")


def remove_bridge() -> None:
    if sh("ip", "link", "show", BRIDGE, check=False).returncode == 0:
        sh("ip", "link", "delete", BRIDGE)


def write_cni_config(conf_dir: Path) -> None:
    """The pods' network: the bridge, addresses from POD_CIDR, a default route to the host (Services)."""
    conf_dir.mkdir(parents=True, exist_ok=True)
    conf = {
        "cniVersion": "1.0.0",
        "name": CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_CIDR, "gateway": NODE_IP}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(conf_dir.parent / "ipam"),
                },
            },
        ],
    }
    (conf_dir / "10-sharelake.conflist").write_text(json.dumps(conf, indent=2))


def remove_kube_chains() -> None:
    """Every iptables chain kube-proxy or the CNI plugins made (KUBE-*, CNI-*), in every table."""
    for table in ("filter", "nat", "mangle"):
        listed = sh("iptables", "-t", table, "-S", check=False).stdout.splitlines()
        jumps = [line for line in listed if line.startswith("-A ") and ("-j KUBE-" in line or "-j CNI-" in line)]
        for rule in jumps:
            chain = rule.split()[1]
            if not chain.startswith(("KUBE-", "CNI-")):
                sh("iptables", "-t", table, "-D", *shlex.split(rule)[1:], check=False)
        chains = [line.split()[1] for line in listed if line.startswith("-N ")]
        ours = [c for c in chains if c.startswith(("KUBE-", "CNI-"))]
        for chain in ours:
            sh("iptables", "-t", table, "-F", chain, check=False)
        for chain in ours:
            sh("iptables", "-t", table, "-X", chain, check=False)
