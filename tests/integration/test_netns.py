"""dsrun across hosts that are separate network stacks: four network namespaces on a bridge, each
with its own address (10.99.0.1-4) and OpenSSH server (scripts/netns_hosts.py); dsrun runs on host 1,
as on a cluster's first node. Faults are made in the network, not in processes: a host unreachable
at start, a cable pulled mid-training, a host's agent killed, a rate-limited link. Each ends within
its timeout, names the host, and leaves no process of the job on any host. Needs root (skips
otherwise); waits out a --comm_timeout, hence labelled slow."""
import json, os, shutil, signal, subprocess, time
import pytest

from conftest import DSRUN, ROOT, run
from netns_hosts import NetnsHosts, cannot_make_namespaces
from throwaway_sshd import free_port

DSWORKER = os.environ.get("DSWORKER_BIN", os.path.join(ROOT, "build", "worker", "dsworker"))
CONFIG = os.path.join(ROOT, "configs", "mlp.json")
COMM_TIMEOUT, GRACE = 5, 2
THREE_HOSTS = "10.99.0.1 slots=1\n10.99.0.2 slots=1\n10.99.0.3 slots=1\n"


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    why_not = cannot_make_namespaces()
    if why_not:
        pytest.skip(why_not)
    if not os.path.exists("/usr/sbin/sshd"):
        pytest.fail("/usr/sbin/sshd is missing: run scripts/install-deps.sh --tests")
    with NetnsHosts(4, str(tmp_path_factory.mktemp("netns"))) as hosts:
        yield hosts


@pytest.fixture
def hosts(net):
    """The four hosts, with every cable plugged in and unshaped again after the test, and whatever a
    failed test left running on them killed (so that it cannot spill into the next one)."""
    yield net
    net.restore()
    for i in range(1, net.count + 1):
        for pid in net.job_pids(i):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def on_host_1(net, hostfile, *args):
    return [*net.exec_args(1), DSRUN, "-H", hostfile, *net.ssh_args(), *args]


def train(steps_or_epochs, metrics):
    return [DSWORKER, "--model", "mlp", "--config", CONFIG, *steps_or_epochs, "--metrics", metrics]


def losses(path):
    with open(path) as f:
        return [json.loads(line)["loss"] for line in f]


def left_on_hosts(net, within):
    """{host: [pids]} of job processes still on any host after waiting up to `within` seconds."""
    deadline = time.monotonic() + within
    while True:
        left = {net.hosts[i - 1]: pids for i in range(1, net.count + 1) if (pids := net.job_pids(i))}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def start_training(args, env, metrics, steps_seen=3):
    """Starts a long dsworker job and returns once rank 0 has logged `steps_seen` steps."""
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not os.path.exists(metrics) or len(open(metrics).readlines()) < steps_seen:
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    return proc


def finish(proc, timeout=60):
    try:
        _, err = proc.communicate(timeout=timeout)
    finally:
        proc.kill()
    return err


def test_an_unreachable_host_at_start_is_named_within_the_ssh_timeout(hosts, hostfile, clean_env):
    hosts.link_down(4)  # a host switched off: not even an ARP answer
    hf = hostfile("10.99.0.1 slots=1\n10.99.0.2 slots=1\n10.99.0.4 slots=1\n")
    start = time.monotonic()
    r = run(on_host_1(hosts, hf, "--ssh_timeout", "2", "hostname"), clean_env, timeout=60)
    elapsed = time.monotonic() - start
    assert r.returncode == 1, r.stderr
    assert "ssh to 10.99.0.4 (port 2222): cannot connect" in r.stderr, r.stderr
    assert elapsed < 2 + 1.5, f"{elapsed:.1f} s with --ssh_timeout 2"
    assert "[rank" not in r.stdout + r.stderr, "nothing starts anywhere while a host is unreachable"
    assert left_on_hosts(hosts, within=1) == {}


def test_a_cable_pulled_mid_training_stops_the_job_naming_the_host(hosts, hostfile, clean_env, tmp_path):
    metrics = str(tmp_path / "m.jsonl")
    proc = start_training(on_host_1(hosts, hostfile(THREE_HOSTS), "--comm_timeout", str(COMM_TIMEOUT),
                                    "--kill_grace", str(GRACE), *train(["--epochs", "1000"], metrics)),
                          clean_env, metrics)
    cut_at = time.monotonic()
    hosts.link_down(3)
    err = finish(proc)
    elapsed = time.monotonic() - cut_at
    assert proc.returncode == 124, err
    assert "10.99.0.3: no word from its agent for" in err, err
    assert elapsed < COMM_TIMEOUT + GRACE + 1, f"{elapsed:.1f} s from the cut to dsrun's exit"
    # The cut-off host hears nothing from dsrun: its rank gives up at its own --comm_timeout and
    # its agent, with no rank left, ends too.
    assert left_on_hosts(hosts, within=COMM_TIMEOUT) == {}


def test_a_killed_agent_stops_the_job_naming_its_host(hosts, hostfile, clean_env, tmp_path):
    metrics = str(tmp_path / "m.jsonl")
    proc = start_training(on_host_1(hosts, hostfile(THREE_HOSTS), "--comm_timeout", str(COMM_TIMEOUT),
                                    "--kill_grace", str(GRACE), *train(["--epochs", "1000"], metrics)),
                          clean_env, metrics)
    agents = [p for p in hosts.job_pids(2) if open(f"/proc/{p}/cmdline").read().split("\0")[1:2] == ["agent"]]
    assert len(agents) == 1, hosts.job_pids(2)
    killed_at = time.monotonic()
    os.kill(agents[0], signal.SIGKILL)
    err = finish(proc)
    elapsed = time.monotonic() - killed_at
    assert proc.returncode == 1, err
    assert "10.99.0.2: the connection to its agent ended before its ranks were done" in err, err
    assert elapsed < GRACE + 1, f"{elapsed:.1f} s"
    assert left_on_hosts(hosts, within=1) == {}


@pytest.mark.parametrize("launcher", ["ssh", "pdsh", "openmpi", "mpich"])
def test_a_job_across_the_hosts_gives_the_losses_of_the_same_job_on_one_host(launcher, hosts, hostfile, clean_env,
                                                                              tmp_path):
    tool = {"pdsh": "pdsh", "openmpi": "mpirun.openmpi", "mpich": "mpiexec.hydra"}.get(launcher)
    if tool and not shutil.which(tool):
        pytest.fail(f"{tool} is missing: run scripts/install-deps.sh --tests")
    across, alone = str(tmp_path / "across.jsonl"), str(tmp_path / "alone.jsonl")
    r = run(on_host_1(hosts, hostfile(THREE_HOSTS), "--launcher", launcher, *train(["--steps", "12"], across)),
            clean_env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"3 ranks on 3 host(s) via {launcher}" in r.stderr
    local = [DSRUN, "--num_gpus", "3", "--master_port", str(free_port()), *train(["--steps", "12"], alone)]
    r = run(local, dict(clean_env, DSRUN_LOCAL_SLOTS="3"), timeout=120)
    assert r.returncode == 0, r.stderr
    assert len(losses(across)) == 12
    assert losses(across) == losses(alone)


def test_a_rate_limited_link_still_trains_to_the_same_losses(hosts, hostfile, clean_env, tmp_path):
    # No netem on this kernel (no delay qdisc at all): the slow link is a token bucket (tbf) at
    # 2 Mbit/s each way, whose queue delays every packet beyond the rate (here 0.6 -> 2.4 s a run).
    fast, slow = str(tmp_path / "fast.jsonl"), str(tmp_path / "slow.jsonl")
    r = run(on_host_1(hosts, hostfile(THREE_HOSTS), *train(["--steps", "12"], fast)), clean_env, timeout=120)
    assert r.returncode == 0, r.stderr
    hosts.shape(2, "2mbit")
    r = run(on_host_1(hosts, hostfile(THREE_HOSTS), "--comm_timeout", str(COMM_TIMEOUT),
                      *train(["--steps", "12"], slow)), clean_env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert losses(slow) == losses(fast)
    stats = hosts.shaping_stats(2)
    assert "qdisc tbf" in stats and "overlimits 0 " not in stats, f"the link was never throttled:\n{stats}"
