"""The cluster's certificates and kubeconfigs, made with `openssl` under `<state>/pki`.

One CA signs every certificate: the API server's serving certificate (its names: the bridge
address, the `kubernetes` service's address and DNS names), the kubelet's, and a client
certificate per component (its user in CN, its groups in O, as Kubernetes' x509 authenticator
reads them). The service-account key pair signs the pods' tokens. Made once per state folder:
a restarted cluster keeps its CA, so a kubeconfig written before stays valid.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

# user (CN), groups (O) of each component's client certificate
CLIENTS: dict[str, tuple[str, str]] = {
    "admin": ("sharelake-admin", "system:masters"),
    "controller-manager": ("system:kube-controller-manager", ""),
    "scheduler": ("system:kube-scheduler", ""),
    "kube-proxy": ("system:kube-proxy", ""),
    "apiserver-kubelet-client": ("kube-apiserver-kubelet-client", "system:masters"),
}


@dataclass(frozen=True)
class Pki:
    """The certificates of one cluster under `folder`; `node` is the kubelet's node name."""

    folder: Path
    node: str

    @property
    def ca(self) -> Path:
        return self.folder / "ca.crt"

    def cert(self, name: str) -> Path:
        return self.folder / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.folder / f"{name}.key"

    def make(self, api_ips: list[str], service_ip: str, node_ip: str) -> None:
        """Every certificate and key this cluster needs, those missing only."""
        self.folder.mkdir(parents=True, exist_ok=True)
        if not self.ca.exists():
            self._openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
                          "-subj", "/CN=sharelake-k8s-ca", "-keyout", str(self.key("ca")),
                          "-out", str(self.ca))  # fmt: skip
        names = "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,"
        names += "DNS:kubernetes.default.svc.cluster.local,DNS:localhost"
        ips = ",".join(f"IP:{ip}" for ip in [*api_ips, service_ip])
        self._signed("apiserver", "/CN=kube-apiserver", f"{names},{ips}")
        self._signed("kubelet-serving", f"/CN={self.node}", f"DNS:{self.node},IP:{node_ip}")
        self._signed("kubelet", f"/O=system:nodes/CN=system:node:{self.node}", None)
        for name, (user, group) in CLIENTS.items():
            self._signed(name, (f"/O={group}" if group else "") + f"/CN={user}", None)
        if not self.key("service-account").exists():
            self._openssl("genrsa", "-out", str(self.key("service-account")), "2048")
            self._openssl("rsa", "-in", str(self.key("service-account")), "-pubout",
                          "-out", str(self.folder / "service-account.pub"))  # fmt: skip

    def kubeconfig(self, name: str, server: str, path: Path) -> Path:
        """A kubeconfig for the client certificate `name`, the cluster at `server`."""
        path.write_text(
            f"""apiVersion: v1
kind: Config
clusters:
- name: sharelake
  cluster:
    server: {server}
    certificate-authority: {self.ca}
users:
- name: {name}
  user:
    client-certificate: {self.cert(name)}
    client-key: {self.key(name)}
contexts:
- name: sharelake
  context: {{cluster: sharelake, user: {name}}}
current-context: sharelake
"""
        )
        return path

    def _signed(self, name: str, subject: str, alt_names: str | None) -> None:
        if self.cert(name).exists():
            return
        csr = self.folder / f"{name}.csr"
        self._openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-subj", subject,
                      "-keyout", str(self.key(name)), "-out", str(csr))  # fmt: skip
        ext = self.folder / f"{name}.ext"
        usage = "serverAuth,clientAuth" if alt_names else "clientAuth"
        ext.write_text(
            "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
            f"extendedKeyUsage={usage}\n" + (f"subjectAltName={alt_names}\n" if alt_names else "")
        )
        self._openssl("x509", "-req", "-in", str(csr), "-CA", str(self.ca), "-CAkey", str(self.key("ca")),
                      "-CAcreateserial", "-days", "3650", "-extfile", str(ext),
                      "-out", str(self.cert(name)))  # fmt: skip
        csr.unlink()
        ext.unlink()

    @staticmethod
    def _openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)
