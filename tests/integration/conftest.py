"""Fixtures for dsrun's integration tests: the dsrun binary, a scratch directory the probe
ranks write into, helpers to run dsrun and to check that no process of a job is left, and a
throwaway OpenSSH server on 127.0.0.1..127.0.0.4 (session-wide)."""
import json, os, signal, subprocess, sys, time
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from throwaway_sshd import ThrowawaySshd  # noqa: E402

DSRUN = os.environ.get("DSRUN_BIN", os.path.join(ROOT, "build", "cli", "dsrun"))
PROBE = os.path.join(HERE, "probe.py")


@pytest.fixture(scope="session")
def dsrun():
    if not os.access(DSRUN, os.X_OK):
        pytest.fail(f"dsrun binary not found at {DSRUN} (build first, or set DSRUN_BIN)")
    return DSRUN


@pytest.fixture
def outdir(tmp_path):
    d = tmp_path / "out"
    d.mkdir()
    return str(d)


@pytest.fixture
def clean_env(tmp_path):
    """A launcher environment with HOME in a temp dir (no ~/.ssh/config, no ~/.deepspeed_env)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DS_", "DSRUN_", "CUDA_VISIBLE"))}
    home = tmp_path / "home"
    home.mkdir()
    env["HOME"] = str(home)
    return env


def run(args, env, cwd=None, timeout=60, **kw):
    return subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, **kw)


def read_envs(outdir):
    envs = {}
    for name in os.listdir(outdir):
        if name.startswith("env."):
            with open(os.path.join(outdir, name)) as f:
                envs[int(name.split(".")[1])] = json.load(f)
    return envs


def job_pids(outdir):
    pids = []
    for name in os.listdir(outdir):
        if name.startswith("pid."):
            with open(os.path.join(outdir, name)) as f:
                pids += [int(p) for p in f.read().split()]
    return pids


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone, or going while /proc is read (ESRCH)
        return False


def wait_all_gone(pids, within):
    """Waits up to `within` seconds for every pid to be gone; returns the ones still alive."""
    deadline = time.monotonic() + within
    while True:
        left = [p for p in pids if alive(p)]
        if not left or time.monotonic() > deadline:
            for p in left:
                try:
                    os.kill(p, signal.SIGKILL)  # do not leak into other tests
                except ProcessLookupError:
                    pass
            return left
        time.sleep(0.02)


def rank_pids(marker, dsworker):
    """{RANK: pid} of the `dsworker` processes whose command line contains `marker`."""
    found = {}
    out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    for pid in out:
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if not f.read().startswith(dsworker.encode()):
                    continue
        except OSError:
            continue
        if b"RANK" in env:
            found[int(env[b"RANK"])] = int(pid)
    return found


def wait_for_files(outdir, prefix, count, within=20):
    deadline = time.monotonic() + within
    while sum(n.startswith(prefix) for n in os.listdir(outdir)) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"only {sum(n.startswith(prefix) for n in os.listdir(outdir))} of {count} "
                                 f"'{prefix}' files after {within} s")
        time.sleep(0.02)


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    if not os.path.exists("/usr/sbin/sshd"):
        pytest.fail("/usr/sbin/sshd is missing: run scripts/install-deps.sh")
    server = ThrowawaySshd(4, str(tmp_path_factory.mktemp("sshd")))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def hostfile(tmp_path):
    def make(text):
        path = tmp_path / "hostfile"
        path.write_text(text)
        return str(path)
    return make
