#!/usr/bin/env python3
"""A throwaway OpenSSH server on loopback for tests and benchmarks.

It generates a host key and a user key in a temporary directory, authorises the user key,
writes a known_hosts file for every listen address, and runs /usr/sbin/sshd in the foreground
on a free port of 127.0.0.1..127.0.0.N (each address is one "host"). Nothing outside the
directory is touched, except /run/sshd, which sshd needs when started as root.

Use as a context manager from Python, or from a shell:
    scripts/throwaway_sshd.py --hosts 4 --dir /tmp/sshd   # prints its settings, runs until killed
"""
import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ThrowawaySshd:
    """sshd on 127.0.0.1..127.0.0.<hosts>:<port> with keys in `workdir`.

    `hosts` is a count of loopback addresses or a list of addresses; `port` is a free one unless
    given. Keys already in `workdir` are kept. Attributes after start(): port, hosts (list of
    addresses), identity (private key path), known_hosts (path), host_key_pub (path), workdir.
    """

    def __init__(self, hosts=2, workdir=None, wrapper=None, port=None):
        self.hosts = [f"127.0.0.{i}" for i in range(1, hosts + 1)] if isinstance(hosts, int) else list(hosts)
        self.port = port
        self.workdir = workdir or tempfile.mkdtemp(prefix="dsrun-sshd-")
        self.wrapper = wrapper or []  # e.g. ["unshare", "-m", "sh", "-c", "mount … && exec \"$0\" \"$@\""]
        self.proc = None

    def _keygen(self, path):
        if not os.path.exists(path):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", path], check=True)

    def start(self, timeout=10.0):
        os.makedirs(self.workdir, exist_ok=True)
        host_key = os.path.join(self.workdir, "host_ed25519")
        self.identity = os.path.join(self.workdir, "id_ed25519")
        self._keygen(host_key)
        self._keygen(self.identity)
        self.host_key_pub = host_key + ".pub"
        shutil.copy(self.identity + ".pub", os.path.join(self.workdir, "authorized_keys"))
        self.port = self.port or free_port()
        with open(self.host_key_pub) as f:
            key_type, key_data = f.read().split()[:2]
        self.known_hosts = os.path.join(self.workdir, "known_hosts")
        with open(self.known_hosts, "w") as f:
            for h in self.hosts:
                f.write(f"[{h}]:{self.port} {key_type} {key_data}\n")
        config = os.path.join(self.workdir, "sshd_config")
        with open(config, "w") as f:
            f.write(f"Port {self.port}\n")
            for h in self.hosts:
                f.write(f"ListenAddress {h}\n")
            f.write(
                f"HostKey {host_key}\n"
                f"PidFile {self.workdir}/sshd.pid\n"
                f"AuthorizedKeysFile {self.workdir}/authorized_keys\n"
                "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
                "PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\nPrintMotd no\n"
                "MaxStartups 200:30:400\nMaxSessions 200\nLogLevel ERROR\n"
            )
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        self.proc = subprocess.Popen(
            self.wrapper + [SSHD, "-D", "-e", "-f", config],
            stdin=subprocess.DEVNULL,
            stderr=open(os.path.join(self.workdir, "sshd.log"), "w"),
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        pending = list(self.hosts)
        while pending:
            if self.proc.poll() is not None:
                with open(os.path.join(self.workdir, "sshd.log")) as f:
                    raise RuntimeError(f"sshd exited with {self.proc.returncode}: {f.read()}")
            try:
                with socket.create_connection((pending[0], self.port), timeout=0.5) as s:
                    if s.recv(4).startswith(b"SSH"):
                        pending.pop(0)
                        continue
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"sshd did not listen on {pending[0]}:{self.port} within {timeout} s")
            time.sleep(0.05)
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def ssh_args(self):
        """dsrun flags that make it use this server."""
        return ["--ssh_port", str(self.port), "--ssh_identity", self.identity, "--ssh_known_hosts", self.known_hosts]

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def serve_until_signalled(fixture, describe):
    """Starts `fixture` (a context manager), prints describe(it), and keeps it up until SIGINT or SIGTERM."""
    stop = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)  # so that sigwait, not the default action, takes them
    with fixture as started:
        print(describe(started), flush=True)
        signal.sigwait(stop)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=2, help="number of loopback addresses (127.0.0.1..N)")
    parser.add_argument("--dir", default=None, help="working directory for keys and config")
    args = parser.parse_args()
    serve_until_signalled(ThrowawaySshd(args.hosts, args.dir), lambda sshd: (
        f"port={sshd.port} identity={sshd.identity} known_hosts={sshd.known_hosts} hosts={','.join(sshd.hosts)}"))


if __name__ == "__main__":
    sys.exit(main())
