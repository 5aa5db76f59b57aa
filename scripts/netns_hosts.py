#!/usr/bin/env python3
"""Hosts in network namespaces for tests: N namespaces, each with its own network stack, address
and OpenSSH server, cabled by veth pairs to a bridge that lives in a namespace of its own.

    <prefix>-br   bridge br0, one port per host: h1 .. hN  (the switch)
    <prefix>-h1   eth0 = 10.99.0.1/24, lo, sshd on 10.99.0.1:2222  (the other end of h1)
    ...

Nothing is added to the machine's own namespace: its interfaces, addresses and routes are not
touched, and traffic between the hosts never leaves the bridge. Every host's sshd shares one host
key and one authorised user key (scripts/throwaway_sshd.py), so one --ssh_known_hosts and one
--ssh_identity reach them all. A "cable" is the bridge's port: taking it down (link_down) cuts the
host off silently, as a pulled cable or a dead switch port does; shape() rate-limits it with tbf
(this kernel has no netem; see docs/launcher.md). stop() kills every process in the namespaces and
deletes them; namespaces left by a process that died (a killed test run) are removed by the next
start(). Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2.

From Python: `with NetnsHosts(4, workdir) as net: ...`; from a shell:
    scripts/netns_hosts.py --hosts 4 --dir /tmp/net   # prints its settings, runs until killed
"""
import argparse
import contextlib
import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from throwaway_sshd import SSHD, ThrowawaySshd, serve_until_signalled  # noqa: E402

CLONE_NEWNET = 0x40000000
NETNS_DIR = "/run/netns"
NAME_PREFIX = "dsnet"
_libc = ctypes.CDLL(None, use_errno=True)


def ip(*args, check=True):
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r


def namespace_pids(name):
    return [int(p) for p in ip("netns", "pids", name, check=False).stdout.split()]


def _remove_namespace(name):
    for pid in namespace_pids(name):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    ip("netns", "del", name, check=False)


def remove_stale_namespaces():
    """Deletes namespaces left by fixtures whose process is gone (a SIGKILLed test run)."""
    if not os.path.isdir(NETNS_DIR):
        return
    for name in os.listdir(NETNS_DIR):
        m = re.fullmatch(NAME_PREFIX + r"(\d+)-\w+", name)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            _remove_namespace(name)


def cannot_make_namespaces():
    """None when this process can make network namespaces, else why not (for a test's skip)."""
    if not shutil.which("ip"):
        return "iproute2's `ip` is not installed (scripts/install-deps.sh --tests)"
    probe = f"{NAME_PREFIX}{os.getpid()}-probe"
    r = ip("netns", "add", probe, check=False)
    if r.returncode != 0:
        return f"cannot make a network namespace (needs root / CAP_NET_ADMIN): {r.stderr.strip()}"
    ip("netns", "del", probe, check=False)
    return None


@contextlib.contextmanager
def inside(name):
    """Runs the block (and the processes it starts) in namespace `name`; this thread only."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(os.path.join(NETNS_DIR, name), os.O_RDONLY)
    try:
        if _libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {name}")
        try:
            yield
        finally:
            if _libc.setns(own, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back to the original namespace")
    finally:
        os.close(target)
        os.close(own)


class NetnsHosts:
    """`count` hosts 10.99.0.1..count, each in namespace <prefix>-h<i> with sshd on port 2222.

    Attributes after start(): hosts (addresses), identity, known_hosts, port.
    """

    SUBNET = "10.99.0"

    def __init__(self, count=4, workdir=None):
        self.count = count
        self.workdir = workdir or tempfile.mkdtemp(prefix="dsrun-netns-")
        self.prefix = f"{NAME_PREFIX}{os.getpid()}"
        self.bridge_ns = f"{self.prefix}-br"
        self.hosts = [f"{self.SUBNET}.{i}" for i in range(1, count + 1)]
        self.port = 2222  # not 22: known_hosts then names hosts as [addr]:port, as throwaway_sshd writes them
        self.servers = []
        self.namespaces = []

    def host_ns(self, i):
        """The namespace of host i (1-based, as in 10.99.0.i)."""
        return f"{self.prefix}-h{i}"

    def _add_namespace(self, name):
        ip("netns", "add", name)
        self.namespaces.append(name)
        ip("-n", name, "link", "set", "lo", "up")

    def _cable(self, i):
        ns = self.host_ns(i)
        self._add_namespace(ns)
        ip("-n", self.bridge_ns, "link", "add", f"h{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
        ip("-n", self.bridge_ns, "link", "set", f"h{i}", "master", "br0", "up")
        ip("-n", ns, "addr", "add", f"{self.hosts[i - 1]}/24", "dev", "eth0")
        ip("-n", ns, "link", "set", "eth0", "up")

    def _start_sshd(self, i, keys):
        workdir = os.path.join(self.workdir, f"h{i}")
        os.makedirs(workdir, exist_ok=True)
        for name in os.listdir(keys):
            shutil.copy(os.path.join(keys, name), workdir)
        server = ThrowawaySshd([self.hosts[i - 1]], workdir, port=self.port)
        with inside(self.host_ns(i)):  # sshd is started in, and probed from, host i's namespace
            server.start()
        self.servers.append(server)

    def start(self):
        remove_stale_namespaces()
        try:
            self._add_namespace(self.bridge_ns)
            ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge", "forward_delay", "0")
            ip("-n", self.bridge_ns, "link", "set", "br0", "up")
            for i in range(1, self.count + 1):
                self._cable(i)
            keys = os.path.join(self.workdir, "keys")
            os.makedirs(keys, exist_ok=True)
            for key in ("host_ed25519", "id_ed25519"):
                if not os.path.exists(os.path.join(keys, key)):
                    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(keys, key)],
                                   check=True)
            for i in range(1, self.count + 1):
                self._start_sshd(i, keys)
            self.identity = os.path.join(keys, "id_ed25519")
            self.known_hosts = os.path.join(self.workdir, "known_hosts")
            with open(self.known_hosts, "w") as out:
                for server in self.servers:
                    with open(server.known_hosts) as f:
                        out.write(f.read())
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self):
        """Kills every process in the namespaces (sshd included) and deletes them, links with them."""
        for server in self.servers:
            server.stop()
        for name in reversed(self.namespaces):
            _remove_namespace(name)
        self.servers, self.namespaces = [], []

    def ssh_args(self):
        """dsrun flags that make it use these hosts' sshd."""
        return ["--ssh_port", str(self.port), "--ssh_identity", self.identity, "--ssh_known_hosts", self.known_hosts]

    def exec_args(self, i):
        """Prefix that runs a command on host i: ["ip", "netns", "exec", <namespace>]."""
        return ["ip", "netns", "exec", self.host_ns(i)]

    def link_down(self, i):
        """Pulls host i's cable at the switch: its packets are dropped silently from now on."""
        ip("-n", self.bridge_ns, "link", "set", f"h{i}", "down")

    def shape(self, i, rate):
        """Limits host i's link to `rate` (tc syntax, e.g. "2mbit") each way with a token bucket whose
        burst (2 KB) holds one full frame: anything longer is paced at `rate`, the rest waits in its queue."""
        for ns, dev in ((self.bridge_ns, f"h{i}"), (self.host_ns(i), "eth0")):
            subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf",
                            "rate", rate, "burst", "2kb", "latency", "1s"], check=True, capture_output=True)

    def shaping_stats(self, i):
        """`tc -s qdisc show` of host i's eth0 (what its token bucket sent, delayed and dropped)."""
        return subprocess.run(["ip", "netns", "exec", self.host_ns(i), "tc", "-s", "qdisc", "show", "dev", "eth0"],
                              check=True, capture_output=True, text=True).stdout

    def restore(self):
        """Every link up and unshaped again (between tests)."""
        for i in range(1, self.count + 1):
            ip("-n", self.bridge_ns, "link", "set", f"h{i}", "up")
            for ns, dev in ((self.bridge_ns, f"h{i}"), (self.host_ns(i), "eth0")):
                subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root"],
                               capture_output=True)

    def job_pids(self, i):
        """Processes in host i's namespace other than sshd's (what a job left there). sshd's own
        per-connection process is not the job's: over a cut link it lives until TCP gives up."""
        def is_sshd(pid):
            try:
                return os.readlink(f"/proc/{pid}/exe") == os.path.realpath(SSHD)
            except OSError:
                return True  # gone
        return [p for p in namespace_pids(self.host_ns(i)) if not is_sshd(p)]

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=4, help="number of hosts (namespaces)")
    parser.add_argument("--dir", default=None, help="working directory for keys and configs")
    args = parser.parse_args()
    serve_until_signalled(NetnsHosts(args.hosts, args.dir), lambda net: (
        f"hosts={','.join(net.hosts)} run-on-host-1='{' '.join(net.exec_args(1))}' "
        f"ssh-args='{' '.join(net.ssh_args())}'"))


if __name__ == "__main__":
    sys.exit(main())
