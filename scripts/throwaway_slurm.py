#!/usr/bin/env python3
"""A throwaway Slurm cluster on loopback for tests: munged with its own key, slurmctld, and one
slurmd per node, the nodes named by their addresses 127.0.0.1..127.0.0.N (so a node's name is
also how dsrun reaches it). Everything lives in one directory: slurm.conf, the munge key and
socket, spool, state and logs; the ports are free ones. Nothing outside it is touched.

Commands run against it need SLURM_CONF (see env()). Needs root (slurmd starts jobs as their
user) and Debian's slurmctld, slurmd, slurm-client and munge.

From Python: `with ThrowawaySlurm(2, workdir) as slurm: subprocess.run(["sinfo"], env=slurm.env())`;
from a shell:
    scripts/throwaway_slurm.py --nodes 2 --dir /tmp/slurm   # prints SLURM_CONF=..., runs until killed
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from throwaway_sshd import free_port, serve_until_signalled  # noqa: E402

PROGRAMS = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "sinfo")


def missing_programs():
    """The programs this needs that are not installed (searching /usr/sbin too)."""
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return [p for p in PROGRAMS if not shutil.which(p, path=path)]


class ThrowawaySlurm:
    """munged + slurmctld + `nodes` slurmd in `workdir`. After start(): conf (slurm.conf's path),
    nodes (the node names, 127.0.0.1..N), env() for commands that talk to it."""

    def __init__(self, nodes=2, workdir=None, cpus=2):
        self.nodes = [f"127.0.0.{i}" for i in range(1, nodes + 1)]
        self.cpus = cpus
        self.workdir = workdir or tempfile.mkdtemp(prefix="dsrun-slurm-")
        self.procs = []

    def env(self, base=None):
        env = dict(os.environ if base is None else base)
        env["SLURM_CONF"] = self.conf
        return env

    def _spawn(self, name, argv):
        log = open(os.path.join(self.workdir, f"{name}.out"), "w")
        path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
        proc = subprocess.Popen([shutil.which(argv[0], path=path), *argv[1:]], stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True, env=self.env())
        self.procs.append((name, proc))
        return proc

    def start(self, timeout=20.0):
        d = self.workdir
        munge_dir = os.path.join(d, "munge")
        os.makedirs(munge_dir, mode=0o700, exist_ok=True)
        os.chmod(d, 0o755)  # munged wants every directory above its socket traversable
        key = os.path.join(d, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o600)
        self.socket = os.path.join(munge_dir, "munge.sock")
        ctld_port, d_port = free_port(), free_port()
        node_ports = [free_port() for _ in self.nodes]
        for sub in ["state"] + [f"spool-{n}" for n in self.nodes]:
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        self.conf = os.path.join(d, "slurm.conf")
        with open(self.conf, "w") as f:
            f.write(
                "ClusterName=dsrun-test\n"
                f"SlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort={ctld_port}\nSlurmdPort={d_port}\n"
                f"AuthType=auth/munge\nAuthInfo=socket={self.socket}\nCredType=cred/munge\n"
                "SlurmUser=root\nSlurmdUser=root\n"
                f"StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool-%n\n"
                f"SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd-%n.pid\n"
                f"SlurmctldLogFile={d}/slurmctld.log\nSlurmdLogFile={d}/slurmd-%n.log\n"
                "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nMpiDefault=none\n"
                "SchedulerType=sched/builtin\nSelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
                "ReturnToService=2\nJobCompType=jobcomp/none\nAccountingStorageType=accounting_storage/none\n"
                "KillWait=2\nInactiveLimit=0\nMinJobAge=2\n"
            )
            for name, port in zip(self.nodes, node_ports):
                f.write(f"NodeName={name} NodeAddr={name} Port={port} CPUs={self.cpus} State=UNKNOWN\n")
            f.write("PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n")
        self._spawn("munged", ["munged", "-F", "-f", "-S", self.socket, f"--key-file={key}",
                               f"--log-file={d}/munged.log", f"--pid-file={d}/munged.pid", f"--seed-file={d}/munged.seed"])
        self._wait(lambda: os.path.exists(self.socket), "munged's socket", timeout)
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", self.conf])
        for name in self.nodes:
            self._spawn(f"slurmd-{name}", ["slurmd", "-D", "-N", name, "-f", self.conf])
        self._wait(self._all_idle, "every node idle in sinfo", timeout)
        return self

    def _all_idle(self):
        r = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=self.env(), capture_output=True, text=True)
        states = dict(line.split() for line in r.stdout.splitlines() if len(line.split()) == 2)
        return all(states.get(n) == "idle" for n in self.nodes)

    def _wait(self, ready, what, timeout):
        deadline = time.monotonic() + timeout
        while not ready():
            for name, proc in self.procs:
                if proc.poll() is not None:
                    with open(os.path.join(self.workdir, f"{name}.out")) as f:
                        raise RuntimeError(f"{name} exited with {proc.returncode}: {f.read()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} not ready within {timeout} s (logs in {self.workdir})")
            time.sleep(0.1)

    def stop(self):
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for _, proc in reversed(self.procs):
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs = []

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc):
        self.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=2, help="number of nodes (127.0.0.1..N)")
    parser.add_argument("--dir", default=None, help="working directory for the configuration, state and logs")
    args = parser.parse_args()
    serve_until_signalled(ThrowawaySlurm(args.nodes, args.dir),
                          lambda slurm: f"SLURM_CONF={slurm.conf} nodes={','.join(slurm.nodes)}")


if __name__ == "__main__":
    sys.exit(main())
