"""The one-node cluster's processes: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
containerd (with runc and the CNI plugins), the kubelet, kube-proxy, and CoreDNS as a Deployment.

Binaries come from `build.sh`'s cache (`SHARELAKE_K8S_CACHE`); the cluster's state (etcd's data,
the certificates, the kubelet's and containerd's folders, the logs) lives under `STATE`, made anew
at each start but for the certificates. Every process runs in a session of its own with its pid
under `<state>/pids`; `stop()` removes the pods, the processes, their mounts, the pod network and
the iptables chains (`devkit.k8s.leftovers`), and a start first does the same to what a killed run
left. `kubeconfig` is the admin's, for kubectl, spark-submit (`KUBECONFIG`) and the tests.
"""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from devkit.k8s import leftovers, network
from devkit.k8s.pki import Pki

CACHE = Path(os.environ.get("SHARELAKE_K8S_CACHE", Path.home() / ".cache" / "sharelake" / "k8s"))
BIN = CACHE / "bin"
IMAGES = CACHE / "images"
STATE = Path(os.environ.get("SHARELAKE_K8S_STATE", "/var/lib/sharelake-k8s"))
NODE = "sharelake-node"
API_PORT = 6443
ETCD_PORT = 23790
CONTAINERD_SOCKET = "/run/containerd/containerd.sock"  # containerd's own default: `ctr` needs no flag
PAUSE_IMAGE = "localhost/pause:3.10"
COREDNS_IMAGE = "localhost/coredns:1.12.4"
COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl")


def built() -> bool:
    """The binaries and system images `build.sh` makes are all in the cache."""
    binaries = (*COMPONENTS, "etcd", "coredns", "pause")
    return all((BIN / b).exists() for b in binaries) and len(list(IMAGES.glob("*.tar"))) >= 2


def wait_for(what: str, check: Callable[[], bool], timeout_s: float, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:]) if log and log.exists() else ""
    raise RuntimeError(f"{what} not ready within {timeout_s:.0f}s\n{tail}")


class K8sCluster:
    """One node, its control plane on the bridge's host address (`network.NODE_IP`)."""

    def __init__(self, state: Path = STATE) -> None:
        self.state = state
        self.pki = Pki(state / "pki", NODE)
        self.kubeconfig = state / "admin.kubeconfig"
        self.server = f"https://{network.NODE_IP}:{API_PORT}"

    # -- what users of the cluster call ------------------------------------------------------------

    def kubectl(self, *args: str, check: bool = True, input: str | None = None, timeout: float = 120) -> str:
        proc = subprocess.run(
            [str(BIN / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True, text=True, input=input, timeout=timeout,
        )  # fmt: skip
        if check and proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout

    def apply(self, manifest: str) -> None:
        self.kubectl("apply", "-f", "-", input=manifest)

    def import_image(self, archive: Path) -> None:
        """Load a docker archive into the kubelet's containerd (namespace k8s.io)."""
        subprocess.run(
            ["ctr", "--address", CONTAINERD_SOCKET, "-n", "k8s.io", "images", "import", str(archive)],
            check=True, capture_output=True,
        )  # fmt: skip

    def load_image(self, image: str) -> None:
        """An image of podman's store (`make image`) into the node's containerd, once per build of it:
        a later load of the same image ID (podman's) is skipped while containerd still has it."""
        image_id = subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}", image],
                                  capture_output=True, text=True).stdout.strip()  # fmt: skip
        if not image_id:
            raise RuntimeError(f"no image {image} in podman's store: `make image` builds it from the Dockerfile")
        stamp = self.state / "images" / f"{image.replace('/', '_').replace(':', '_')}.id"
        listed = subprocess.run(["ctr", "--address", CONTAINERD_SOCKET, "-n", "k8s.io", "images", "ls", "-q"],
                                capture_output=True, text=True).stdout.split()  # fmt: skip
        if stamp.exists() and stamp.read_text() == image_id and image in listed:
            return
        save = subprocess.Popen(["podman", "save", "--format", "docker-archive", image], stdout=subprocess.PIPE)
        subprocess.run(["ctr", "--address", CONTAINERD_SOCKET, "-n", "k8s.io", "images", "import", "-"],
                       stdin=save.stdout, check=True, capture_output=True)  # fmt: skip
        if save.wait() != 0:
            raise RuntimeError(f"podman save {image} failed")
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(image_id)

    def log(self, name: str) -> Path:
        return self.state / "logs" / f"{name}.log"

    # -- start and stop ----------------------------------------------------------------------------

    def start(self) -> K8sCluster:
        if not built():
            raise RuntimeError(f"the cluster is not built in {CACHE}: run `make k8s`")
        self.stop()
        for sub in ("logs", "pids"):
            (self.state / sub).mkdir(parents=True, exist_ok=True)
        network.set_sysctls(self.state / "sysctls.json")
        network.create_bridge()
        self.pki.make([network.NODE_IP, "127.0.0.1"], network.API_SERVICE_IP, network.NODE_IP)
        self.pki.kubeconfig("admin", self.server, self.kubeconfig)
        for name in ("controller-manager", "scheduler", "kube-proxy", "kubelet"):
            self.pki.kubeconfig(name, self.server, self._config(f"{name}.kubeconfig"))
        self._start_control_plane()
        self._start_node()
        self._start_dns()
        return self

    def stop(self) -> None:
        """Everything this cluster (or a killed run of it) started, and its network, mounts and rules."""
        if self.kubeconfig.exists() and self._api_ready():
            self.kubectl("delete", "pods", "--all", "--all-namespaces", "--grace-period=0", "--force",
                         "--wait=false", check=False, timeout=30)  # fmt: skip
        leftovers.remove(self.state, BIN)

    def __enter__(self) -> K8sCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- internals ---------------------------------------------------------------------------------

    def _config(self, name: str) -> Path:
        path = self.state / "config" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def _spawn(self, name: str, argv: Sequence[str]) -> None:
        log = self.log(name).open("ab")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)  # fmt: skip
        (self.state / "pids" / f"{name}.pid").write_text(str(proc.pid))

    def _https_ok(self, url: str) -> bool:
        ctx = ssl.create_default_context(cafile=str(self.pki.ca))
        ctx.load_cert_chain(str(self.pki.cert("admin")), str(self.pki.key("admin")))
        try:
            with urllib.request.urlopen(url, context=ctx, timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def _api_ready(self) -> bool:
        return self.pki.ca.exists() and self._https_ok(f"{self.server}/readyz")

    def _start_control_plane(self) -> None:
        etcd_url = f"http://127.0.0.1:{ETCD_PORT}"
        shutil.rmtree(self.state / "etcd", ignore_errors=True)
        self._spawn("etcd", [str(BIN / "etcd"), "--name", NODE, "--data-dir", str(self.state / "etcd"),
                             "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
                             "--listen-peer-urls", f"http://127.0.0.1:{ETCD_PORT + 10}",
                             "--initial-advertise-peer-urls", f"http://127.0.0.1:{ETCD_PORT + 10}",
                             "--initial-cluster", f"{NODE}=http://127.0.0.1:{ETCD_PORT + 10}",
                             "--listen-metrics-urls", f"http://127.0.0.1:{ETCD_PORT + 20}",
                             "--log-level", "warn"])  # fmt: skip
        wait_for("etcd", lambda: _http_ok(f"{etcd_url}/health"), 60, self.log("etcd"))
        p = self.pki
        self._spawn("kube-apiserver", [
            str(BIN / "kube-apiserver"), f"--etcd-servers={etcd_url}",
            f"--advertise-address={network.NODE_IP}", f"--bind-address={network.NODE_IP}", f"--secure-port={API_PORT}",
            f"--service-cluster-ip-range={network.SERVICE_CIDR}", "--authorization-mode=Node,RBAC",
            f"--client-ca-file={p.ca}",
            f"--tls-cert-file={p.cert('apiserver')}", f"--tls-private-key-file={p.key('apiserver')}",
            f"--kubelet-client-certificate={p.cert('apiserver-kubelet-client')}",
            f"--kubelet-client-key={p.key('apiserver-kubelet-client')}", f"--kubelet-certificate-authority={p.ca}",
            f"--service-account-key-file={p.folder / 'service-account.pub'}",
            f"--service-account-signing-key-file={p.key('service-account')}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--kubelet-preferred-address-types=InternalIP",  # the node's name resolves nowhere
            "--allow-privileged=true", "--enable-admission-plugins=NodeRestriction", "--v=1",
        ])  # fmt: skip
        wait_for("kube-apiserver", self._api_ready, 120, self.log("kube-apiserver"))
        self._spawn("kube-controller-manager", [
            str(BIN / "kube-controller-manager"), f"--kubeconfig={self._config('controller-manager.kubeconfig')}",
            "--bind-address=127.0.0.1", "--leader-elect=false", "--use-service-account-credentials",
            f"--service-account-private-key-file={p.key('service-account')}", f"--root-ca-file={p.ca}",
            f"--cluster-signing-cert-file={p.ca}",
            f"--cluster-signing-key-file={p.key('ca')}", f"--service-cluster-ip-range={network.SERVICE_CIDR}", "--v=1",
        ])  # fmt: skip
        self._spawn("kube-scheduler", [
            str(BIN / "kube-scheduler"), f"--kubeconfig={self._config('scheduler.kubeconfig')}",
            "--bind-address=127.0.0.1", "--leader-elect=false", "--v=1",
        ])  # fmt: skip

    def _start_node(self) -> None:
        cni = self.state / "cni" / "net.d"
        network.write_cni_config(cni)
        containerd_conf = self._config("containerd.toml")
        containerd_conf.write_text(CONTAINERD_CONFIG.format(pause=PAUSE_IMAGE, cni_bin=network.CNI_BIN, cni_conf=cni))
        self._spawn("containerd", ["containerd", "--config", str(containerd_conf)])
        wait_for("containerd", lambda: _ctr_ok(), 60, self.log("containerd"))
        for archive in sorted(IMAGES.glob("*.tar")):
            self.import_image(archive)
        kubelet_conf = self._config("kubelet.yaml")
        kubelet_conf.write_text(KUBELET_CONFIG.format(
            node_ip=network.NODE_IP, ca=self.pki.ca, dns=network.DNS_SERVICE_IP, socket=CONTAINERD_SOCKET,
            cert=self.pki.cert("kubelet-serving"), key=self.pki.key("kubelet-serving"),
        ))  # fmt: skip
        self._spawn("kubelet", [
            str(BIN / "kubelet"), f"--config={kubelet_conf}", f"--kubeconfig={self._config('kubelet.kubeconfig')}",
            f"--root-dir={self.state / 'kubelet'}", f"--hostname-override={NODE}", f"--node-ip={network.NODE_IP}",
            "--v=1",
        ])  # fmt: skip
        wait_for("the node", self._node_ready, 120, self.log("kubelet"))
        proxy_conf = self._config("kube-proxy.yaml")
        proxy_conf.write_text(KUBE_PROXY_CONFIG.format(
            kubeconfig=self._config("kube-proxy.kubeconfig"), pods=network.POD_CIDR, node=NODE, node_ip=network.NODE_IP,
        ))  # fmt: skip
        self._spawn("kube-proxy", [str(BIN / "kube-proxy"), f"--config={proxy_conf}", "--v=1"])

    def _node_ready(self) -> bool:
        out = self.kubectl("get", "node", NODE, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
                           check=False)  # fmt: skip
        return out.strip() == "True"

    def _start_dns(self) -> None:
        manifest = (Path(__file__).parent / "coredns.yaml").read_text()
        self.apply(manifest.replace("COREDNS_IMAGE", COREDNS_IMAGE).replace("DNS_SERVICE_IP", network.DNS_SERVICE_IP))
        self.kubectl("-n", "kube-system", "rollout", "status", "deployment/coredns", "--timeout=120s", timeout=130)


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _ctr_ok() -> bool:
    return subprocess.run(["ctr", "--address", CONTAINERD_SOCKET, "version"], capture_output=True).returncode == 0


CONTAINERD_CONFIG = """version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  enable_unprivileged_ports = false
  # no CAP_SYS_RESOURCE here (as in many sandboxes and nested setups): a pod sandbox's oom_score_adj of
  # -998 fails runc's create ("can't get final child's PID from pipe"); clamp it to containerd's own
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{cni_conf}"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
"""

KUBELET_CONFIG = """apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {node_ip}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
  x509: {{clientCAFile: {ca}}}
authorization: {{mode: Webhook}}
tlsCertFile: {cert}
tlsPrivateKeyFile: {key}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
clusterDNS: [{dns}]
clusterDomain: cluster.local
resolvConf: ""
containerRuntimeEndpoint: unix://{socket}
serializeImagePulls: false
imageGCHighThresholdPercent: 100
evictionHard: {{memory.available: "200Mi", nodefs.available: "2%", imagefs.available: "2%", nodefs.inodesFree: "2%"}}
"""

KUBE_PROXY_CONFIG = """apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {{kubeconfig: {kubeconfig}}}
mode: iptables
clusterCIDR: {pods}
hostnameOverride: {node}
bindAddress: {node_ip}
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
nodePortAddresses: ["{node_ip}/32"]
conntrack: {{maxPerCore: 0}}
"""


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m devkit.k8s.cluster", description=__doc__)
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("--image", help="with start: an image of podman's store to load into the node (make image)")
    args = parser.parse_args(argv)
    cluster = K8sCluster()
    if args.action == "start":
        cluster.start()
        if args.image:
            cluster.load_image(args.image)
        print(f"[k8s] up: {cluster.server}; KUBECONFIG={cluster.kubeconfig}; `make k8s-stop` stops it")
    elif args.action == "stop":
        cluster.stop()
        print("[k8s] stopped; its processes, pods, mounts, bridge and iptables chains removed")
    else:
        print(cluster.kubectl("get", "nodes,pods", "-A", "-o", "wide") if cluster._api_ready() else "[k8s] not running")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
