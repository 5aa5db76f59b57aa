"""Helpers shared by the benchmarks in bench/: logging, /proc liveness, and killing what a run
started (process lists and whole process groups). Also makes scripts/ importable
(throwaway_sshd: the loopback SSH server and free_port)."""
import datetime
import os
import signal
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts"))


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def proc_state(pid):
    """(state, starttime) of pid, or None if it is gone. A zombie counts as gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2:].split()
    if fields[0] in (b"Z", b"X"):
        return None
    return fields[0], int(fields[19])


def alive(pid):
    return proc_state(pid) is not None


def kill_pids(pids, sig=signal.SIGKILL):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def kill_group(proc, grace=2.0):
    """SIGTERM a launcher's process group (started in its own session), SIGKILL after `grace`."""
    if proc is None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            return
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            continue
    try:  # the group may outlive its leader
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass


def binary_id(path):
    """mtime and size of a binary: a rebuild during the benchmark shows up as a change."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return {"mtime": datetime.datetime.fromtimestamp(st.st_mtime, datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M:%S UTC"), "size": st.st_size}
