"""Removing what the one-node cluster started, whether this run or a killed one started it.

In order: the Kubernetes processes (by the pids recorded under `<state>/pids`, and any process
still running a binary of the cluster's cache), every container and sandbox in containerd's
`k8s.io` namespace, containerd and its shims, the mounts under the kubelet's and containerd's
folders and the pods' network namespaces, the bridge, kube-proxy's and the CNI plugins' iptables
chains, the pods' cgroups, and the sysctls as they were.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from devkit.k8s import network

CONTAINERD_DIRS = ("/run/containerd", "/var/lib/containerd")
CGROUP_ROOT = Path("/sys/fs/cgroup")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


def _pids_running(match: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", match], capture_output=True, text=True).stdout
    return [int(p) for p in out.split() if int(p) != os.getpid()]


def _kill(pids: list[int], grace_s: float = 10.0) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _ctr(*args: str) -> str:
    proc = subprocess.run(["ctr", "-n", "k8s.io", *args], capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else ""


def _containers() -> None:
    """Kill and delete every task and container of the `k8s.io` namespace (pods' and sandboxes')."""
    tasks = [line.split()[0] for line in _ctr("tasks", "ls", "-q").splitlines() if line.strip()]
    for task in tasks:
        _ctr("tasks", "kill", "-s", "SIGKILL", "--all", task)
    for task in tasks:
        for _ in range(20):
            if _ctr("tasks", "delete", "-f", task) or task not in _ctr("tasks", "ls", "-q"):
                break
            time.sleep(0.2)
    for container in _ctr("containers", "ls", "-q").split():
        _ctr("containers", "delete", container)


def _mounts_under(prefixes: tuple[str, ...]) -> list[str]:
    points = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    return sorted((p for p in points if p.startswith(prefixes)), key=len, reverse=True)


def _netns() -> None:
    for name in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split("\n"):
        name = name.split(" ")[0]
        if name.startswith("cni-"):
            subprocess.run(["ip", "netns", "delete", name], capture_output=True)


def _cgroups() -> None:
    """The kubelet's `kubepods` cgroups in every v1 hierarchy, deepest first (empty once pods are gone)."""
    for hierarchy in CGROUP_ROOT.iterdir():
        top = hierarchy / "kubepods"
        if not top.is_dir():
            continue
        for folder in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            try:
                folder.rmdir()
            except OSError:
                pass
        try:
            top.rmdir()
        except OSError:
            pass


def _pods_processes() -> list[int]:
    """Every process still in a pod's cgroup (`kubepods` in any v1 hierarchy): a container whose
    shim is gone (a killed run's) is reparented to init and found only here."""
    pids: set[int] = set()
    for hierarchy in CGROUP_ROOT.iterdir():
        top = hierarchy / "kubepods"
        if top.is_dir():
            for procs in top.rglob("cgroup.procs"):
                pids |= {int(p) for p in procs.read_text().split()}
    return sorted(pids)


def remove(state: Path, bin_dir: Path) -> None:
    pid_dir = state / "pids"
    recorded = [int(p.read_text()) for p in pid_dir.glob("*.pid")] if pid_dir.exists() else []
    # the kubelet first, so it restarts no container while they are removed; then the containers,
    # while containerd still runs to stop them; then everything else
    _kill(_pids_running(str(bin_dir / "kubelet")))
    if _pids_running("containerd --config"):
        _containers()
    _kill([p for p in recorded if _alive(p)] + _pids_running(str(bin_dir) + "/"), grace_s=5.0)
    _kill(_pids_running("containerd --config") + _pids_running("containerd-shim-runc-v2 -namespace k8s.io"))
    _kill(_pods_processes(), grace_s=2.0)
    for point in _mounts_under((str(state), *CONTAINERD_DIRS, "/run/netns/cni-", "/var/run/netns/cni-")):
        subprocess.run(["umount", "-l", point], capture_output=True)
    _netns()
    subprocess.run([str(bin_dir / "kube-proxy"), "--cleanup"], capture_output=True)
    network.remove_kube_chains()
    network.remove_bridge()
    _cgroups()
    network.restore_sysctls(state / "sysctls.json")
    for p in pid_dir.glob("*.pid") if pid_dir.exists() else []:
        p.unlink()
    subprocess.run(["rm", "-rf", str(state / "kubelet"), str(state / "cni")], capture_output=True)
