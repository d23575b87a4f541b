"""A network of hosts on one machine, and the faults a network makes, with the kernel's own tools.

Each host is a network namespace of its own with one address: a broker, the S3 server, a job's
driver, the test's client. No process reaches another through loopback; every packet between two
hosts crosses a router namespace, where the faults are applied:

    host ns  <run>-<name>        eth0 10.213.<i>.2/24, default route via 10.213.<i>.1
        |  veth pair
    router ns <run>-router       h<i> 10.213.<i>.1/24, IPv4 forwarding on

- `Cut(a, b)`: every packet between two hosts dropped silently (`ip rule ... blackhole` in the
  router: the peers see silence, not a reset or an ICMP error); `one_way=True` drops only a -> b.
- `SlowLink(host, rate, queue_s)`: a host's link in both directions limited to `rate` by a `tbf`
  qdisc whose queue holds `queue_s` seconds of it, so packets wait (delay) before they are dropped.

A host has no name service but its own: `ip netns exec` gives a process started in it the host's
`/etc/netns/<namespace>/hosts` (localhost, the machine's name and the host's own address) and a
`resolv.conf` naming only the host's loopback, so a lookup (a broker's of its clients' addresses,
a JVM's of the machine's name) fails at once instead of waiting seconds for a name server no host
reaches.

Every fault has `apply()` and `heal()`; the network heals what is still applied when it closes and
says which (`Network.close` returns them, so a test fixture can fail the test). Nothing is created
in the machine's own namespace: every link, address, rule and qdisc lives in a namespace this
network created and goes with it. Names carry the creating process's id (`sln<pid>-...`), so a
network left by a killed run is found and removed at the next start (`remove_leftovers`).

Python code runs inside a host with `Host.call`: a thread that entered the host's namespace
(setns(2) through ctypes: `os.setns` arrives in Python 3.12). A librdkafka client created there
keeps its threads, and so its sockets, in that host, whichever thread uses it afterwards.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

PREFIX = "sln"  # every namespace this module creates: sln<pid>-<name>
SUBNET = "10.213"  # host i: 10.213.<i>.2, its router side 10.213.<i>.1 (only inside these namespaces)
NETNS_DIR = Path("/var/run/netns")
NETNS_ETC = Path("/etc/netns")  # per-namespace files `ip netns exec` binds over /etc
CLONE_NEWNET = 0x40000000
MAX_HOSTS = 250
_LEFTOVER = re.compile(rf"^{PREFIX}(\d+)-")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")
    return done


def _tc(namespace: str, *args: str, check: bool = True) -> None:
    done = subprocess.run(["tc", "-n", namespace, *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"tc -n {namespace} {' '.join(args)} failed: {done.stderr.strip()}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def namespaces() -> list[str]:
    """The names of the machine's network namespaces (`ip netns list`)."""
    return [line.split()[0] for line in _ip("netns", "list").stdout.splitlines() if line.strip()]


def delete_namespace(name: str) -> None:
    """Kill every process inside `name`, then delete it (a process inside would keep it alive)."""
    pids = _ip("netns", "pids", name, check=False).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    _ip("netns", "del", name, check=False)
    shutil.rmtree(NETNS_ETC / name, ignore_errors=True)


def remove_leftovers() -> list[str]:
    """Delete the namespaces a network of a process no longer running left behind; return their names."""
    removed = []
    for name in namespaces():
        m = _LEFTOVER.match(name)
        if m and not _pid_alive(int(m.group(1))):
            delete_namespace(name)
            removed.append(name)
    return removed


def ours() -> list[str]:
    """The namespaces networks of this process hold now (empty once each is closed)."""
    return [n for n in namespaces() if n.startswith(f"{PREFIX}{os.getpid()}-")]


_libc: Any = ctypes.CDLL(None, use_errno=True)


def _enter(namespace: str) -> None:
    """Move the calling thread into `namespace` (setns(2); only this thread and what it starts)."""
    fd = os.open(NETNS_DIR / namespace, os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into {namespace}: {os.strerror(err)}")
    finally:
        os.close(fd)


@dataclass
class Host:
    """One host of a network: its namespace, its address, and how to run things inside it."""

    name: str
    namespace: str
    address: str
    router_link: str  # its link's name on the router's side
    _calls: ThreadPoolExecutor | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` run inside this host (`ip netns exec` execs it: the process is `argv` itself)."""
        return ["ip", "netns", "exec", self.namespace, *argv]

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.command(argv), **kwargs)

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` run in a thread inside this host; its result or its exception."""
        with self._lock:
            if self._calls is None:
                self._calls = ThreadPoolExecutor(1, f"host-{self.name}", initializer=_enter, initargs=(self.namespace,))
            calls = self._calls
        return calls.submit(fn, *args, **kwargs).result()

    def close(self) -> None:
        with self._lock:
            calls, self._calls = self._calls, None
        if calls is not None:
            calls.shutdown(wait=False, cancel_futures=True)


class Fault(Protocol):
    """One network fault: applied, then healed (healing twice, or a fault never applied, is harmless)."""

    def apply(self) -> None: ...

    def heal(self) -> None: ...

    def describe(self) -> str: ...


class Network:
    """Hosts joined by a router, with faults between them. A context manager; `close()` removes it all.

    `run` names this network among others of the same process (tests of one session each make
    their own); everything it creates is named `sln<pid>-<run>...`.
    """

    def __init__(self, run: str) -> None:
        if not re.fullmatch(r"[a-z0-9]{1,6}", run):
            raise ValueError(f"a network's run name is 1-6 lower-case letters or digits, not {run!r}")
        remove_leftovers()
        self.prefix = f"{PREFIX}{os.getpid()}-{run}"
        self.router = f"{self.prefix}-rt"
        self.hosts: dict[str, Host] = {}
        self.applied: list[Fault] = []
        _ip("netns", "add", self.router)
        try:
            _ip("-n", self.router, "link", "set", "lo", "up")
            subprocess.run(
                ["ip", "netns", "exec", self.router, "sysctl", "-qw", "net.ipv4.ip_forward=1"], check=True, timeout=30
            )
        except BaseException:
            self.close()
            raise

    def host(self, name: str) -> Host:
        """The host `name`, created on first use: its namespace, its link to the router, its address."""
        if name in self.hosts:
            return self.hosts[name]
        if not re.fullmatch(r"[a-z0-9]{1,8}", name):
            raise ValueError(f"a host's name is 1-8 lower-case letters or digits, not {name!r}")
        index = len(self.hosts) + 1
        if index > MAX_HOSTS:
            raise ValueError(f"a network holds at most {MAX_HOSTS} hosts")
        namespace = f"{self.prefix}-{name}"
        link = f"h{index}"
        host = Host(name, namespace, f"{SUBNET}.{index}.2", link)
        self.hosts[name] = host
        _ip("netns", "add", namespace)
        _ip("-n", namespace, "link", "set", "lo", "up")
        # created inside the host, its peer moved to the router: nothing ever sits in the machine's namespace
        _ip("-n", namespace, "link", "add", "eth0", "type", "veth", "peer", "name", link)
        _ip("-n", namespace, "link", "set", link, "netns", self.router)
        _ip("-n", self.router, "addr", "add", f"{SUBNET}.{index}.1/24", "dev", link)
        _ip("-n", namespace, "addr", "add", f"{host.address}/24", "dev", "eth0")
        _ip("-n", self.router, "link", "set", link, "up")
        _ip("-n", namespace, "link", "set", "eth0", "up")
        _ip("-n", namespace, "route", "add", "default", "via", f"{SUBNET}.{index}.1")
        etc = NETNS_ETC / namespace
        etc.mkdir(parents=True, exist_ok=True)
        machine = socket.gethostname()
        (etc / "hosts").write_text(f"127.0.0.1 localhost\n::1 localhost\n{host.address} {machine} {name}\n")
        (etc / "resolv.conf").write_text("nameserver 127.0.0.1\n")  # nothing listens: a lookup fails at once
        return host

    # -- faults ------------------------------------------------------------------------------------

    def cut(self, a: Host, b: Host, *, one_way: bool = False) -> Cut:
        return Cut(self, a, b, one_way)

    def slow(self, host: Host, rate: str, queue_s: float) -> SlowLink:
        return SlowLink(self, host, rate, queue_s)

    def applying(self, fault: Fault) -> None:
        if fault not in self.applied:
            self.applied.append(fault)

    def healed(self, fault: Fault) -> None:
        if fault in self.applied:
            self.applied.remove(fault)

    # -- teardown ----------------------------------------------------------------------------------

    def close_faults(self) -> list[str]:
        """Heal every fault still applied; return what they were (a test that left one is wrong)."""
        unhealed = [f.describe() for f in self.applied]
        for fault in list(self.applied):
            with contextlib.suppress(RuntimeError):
                fault.heal()
        self.applied.clear()
        return unhealed

    def close(self) -> list[str]:
        """Heal what is still applied, kill what runs in the hosts, delete every namespace.

        Returns the faults that were still applied (a test that left one unhealed is wrong)."""
        unhealed = self.close_faults()
        for host in self.hosts.values():
            host.close()
            delete_namespace(host.namespace)
        delete_namespace(self.router)
        return unhealed

    def __enter__(self) -> Network:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


@dataclass(eq=False)
class Cut:
    """Packets from `a` to `b` (and from `b` to `a` unless `one_way`) dropped silently by the router."""

    network: Network
    a: Host
    b: Host
    one_way: bool = False

    def _rules(self) -> list[tuple[str, str]]:
        pairs = [(self.a.address, self.b.address)]
        return pairs if self.one_way else [*pairs, (self.b.address, self.a.address)]

    def apply(self) -> None:
        self.network.applying(self)
        for src, dst in self._rules():
            _ip("-n", self.network.router, "rule", "add", "from", src, "to", dst, "blackhole")

    def heal(self) -> None:
        for src, dst in self._rules():
            while (
                _ip(
                    "-n", self.network.router, "rule", "del", "from", src, "to", dst, "blackhole", check=False
                ).returncode
                == 0
            ):
                pass  # a rule added twice is deleted twice
        self.network.healed(self)

    def describe(self) -> str:
        arrow = "->" if self.one_way else "<->"
        return f"cut {self.a.name} {arrow} {self.b.name}"


def _tbf_on_both_ends(network: Network, host: Host, *tbf: str) -> None:
    _tc(network.router, "qdisc", "replace", "dev", host.router_link, "root", "tbf", *tbf)
    _tc(host.namespace, "qdisc", "replace", "dev", "eth0", "root", "tbf", *tbf)


def _clear_both_ends(network: Network, host: Host) -> None:
    _tc(network.router, "qdisc", "del", "dev", host.router_link, "root", check=False)
    _tc(host.namespace, "qdisc", "del", "dev", "eth0", "root", check=False)


@dataclass(eq=False)
class SlowLink:
    """`host`'s link limited to `rate` (tc's units: `2mbit`) each way, queueing up to `queue_s` seconds
    of traffic before dropping: a congested link's delay, then its loss."""

    network: Network
    host: Host
    rate: str
    queue_s: float

    def apply(self) -> None:
        self.network.applying(self)
        latency = f"{int(self.queue_s * 1000)}ms"
        # burst: at least one full-size packet (the veth's MTU) a token refill, or nothing passes
        _tbf_on_both_ends(self.network, self.host, "rate", self.rate, "burst", "32kb", "latency", latency)

    def heal(self) -> None:
        _clear_both_ends(self.network, self.host)
        self.network.healed(self)

    def describe(self) -> str:
        return f"slow link of {self.host.name} ({self.rate}, {self.queue_s:g} s of queue)"
