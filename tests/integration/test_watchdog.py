"""dsrun's watchdog with real dsworker ranks: a rank stopped with SIGSTOP (a hung node) ends the
job within --comm_timeout plus the kill grace, naming the rank, its host and what the others were
waiting in, and nothing is left running; a killed rank still reports as before; a frozen agent
(a hung host) is named too; dsworker honours DS_COMM_TIMEOUT and DEEPSPEED_TIMEOUT on its own."""
import os, shutil, signal, subprocess, time
import pytest

from conftest import ROOT, rank_pids, run, wait_all_gone

DSWORKER = os.environ.get("DSWORKER_BIN", os.path.join(ROOT, "build", "worker", "dsworker"))
CONFIG = os.path.join(ROOT, "configs", "mlp.json")
TIMEOUT, GRACE = 5, 2


def agent_pid(marker_pid):
    """The `dsrun agent` that started process `marker_pid`."""
    with open(f"/proc/{marker_pid}/stat") as f:
        return int(f.read().rsplit(") ", 1)[1].split()[1])


def start_job(args, env, marker, world=2):
    """Starts dsrun ... dsworker (training long enough to be stopped) and waits for its ranks."""
    proc = subprocess.Popen([*args, DSWORKER, "--model", "mlp", "--config", CONFIG, "--epochs", "1000",
                             "--metrics", marker], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while len(pids := rank_pids(marker, DSWORKER)) < world:
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    while not os.path.exists(marker) or os.path.getsize(marker) == 0:  # training, not starting up
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    return proc, pids


def test_a_stopped_rank_ends_the_job_within_the_timeout_naming_it(dsrun, clean_env, tmp_path):
    # A long grace: the stopped rank acts on dsrun's SIGTERM only because the agent continues it
    # (SIGCONT); otherwise it would be gone only at the SIGKILL, 30 s later.
    marker = str(tmp_path / "stopped.jsonl")
    proc, pids = start_job([dsrun, "--num_gpus", "2", "--comm_timeout", str(TIMEOUT), "--kill_grace", "30"],
                           dict(clean_env, DSRUN_LOCAL_SLOTS="2"), marker)
    try:
        stopped_at = time.monotonic()
        os.kill(pids[1], signal.SIGSTOP)
        _, err = proc.communicate(timeout=60)
        elapsed = time.monotonic() - stopped_at
    finally:
        proc.kill()
    assert proc.returncode == 124, err
    assert "rank 1 on localhost made no progress for" in err, err
    assert "rank 0 was waiting in allreduce" in err, err
    assert elapsed < TIMEOUT + 3, f"{elapsed:.1f} s from SIGSTOP to dsrun's exit"
    assert wait_all_gone(list(pids.values()), within=0.5) == [], "the stopped rank was left behind"


def test_a_killed_rank_still_reports_as_before(dsrun, clean_env, tmp_path):
    marker = str(tmp_path / "killed.jsonl")
    proc, pids = start_job([dsrun, "--num_gpus", "2", "--comm_timeout", str(TIMEOUT), "--kill_grace", str(GRACE)],
                           dict(clean_env, DSRUN_LOCAL_SLOTS="2"), marker)
    try:
        os.kill(pids[1], signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 137, err
    assert "rank 1 on localhost killed by SIGKILL" in err
    assert "made no progress" not in err
    assert wait_all_gone(list(pids.values()), within=0.5) == []


def test_a_frozen_agent_is_named_as_a_hung_host(dsrun, clean_env, tmp_path):
    marker = str(tmp_path / "agent.jsonl")
    proc, pids = start_job([dsrun, "--num_gpus", "2", "--comm_timeout", str(TIMEOUT), "--kill_grace", "1"],
                           dict(clean_env, DSRUN_LOCAL_SLOTS="2"), marker)
    agent = agent_pid(pids[0])
    try:
        os.kill(agent, signal.SIGSTOP)  # the whole "host" hangs: its agent and (below) its ranks
        for pid in pids.values():
            os.kill(pid, signal.SIGSTOP)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 124, err
    assert "localhost: no word from its agent for" in err, err
    assert wait_all_gone([agent, *pids.values()], within=2.0) == []


def test_dsworker_alone_honours_ds_comm_timeout_and_deepspeed_timeout(clean_env):
    # Rank 0 of 2 whose peer never comes: the rendezvous gives up after the timeout, naming rank 1.
    base = dict(clean_env, WORLD_SIZE="2", RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="29783")
    for extra, limit in (({"DS_COMM_TIMEOUT": "2"}, "2 s"), ({"DEEPSPEED_TIMEOUT": "0.05"}, "3 s"),
                         ({"DS_COMM_TIMEOUT": "2", "DEEPSPEED_TIMEOUT": "10"}, "2 s")):
        start = time.monotonic()
        r = run([DSWORKER, "--model", "mlp", "--config", CONFIG, "--steps", "1"], dict(base, **extra), timeout=60)
        elapsed = time.monotonic() - start
        assert r.returncode == 1, r.stderr
        assert f"rank 1 did not join within {limit}" in r.stderr, r.stderr
        assert elapsed < 10, f"{elapsed:.1f} s"
    r = run([DSWORKER, "--model", "mlp", "--config", CONFIG, "--steps", "1"], dict(base, DS_COMM_TIMEOUT="soon"))
    assert r.returncode == 1 and "DS_COMM_TIMEOUT='soon' is not a positive number of seconds" in r.stderr


def test_comm_timeout_reaches_the_ranks(dsrun, clean_env, tmp_path):
    r = run([dsrun, "--dry_run", "--format", "json", "--comm_timeout", "7.5", "true"], clean_env)
    assert r.returncode == 0, r.stderr
    assert '"DS_COMM_TIMEOUT": "7.5"' in r.stdout
    r = run([dsrun, "--dry_run", "--format", "json", "true"], dict(clean_env, DEEPSPEED_TIMEOUT="2"))
    assert '"DS_COMM_TIMEOUT": "120"' in r.stdout, "DeepSpeed's minutes become seconds"
    r = run([dsrun, "--dry_run", "true"], dict(clean_env, DEEPSPEED_TIMEOUT="x"))
    assert r.returncode == 2 and "DEEPSPEED_TIMEOUT='x'" in r.stderr


@pytest.mark.parametrize("launcher", ["ssh", "pdsh"])
def test_a_stopped_rank_on_another_host_is_named_with_its_host(dsrun, sshd, hostfile, clean_env, tmp_path, launcher):
    if launcher == "pdsh" and not shutil.which("pdsh"):
        pytest.skip("pdsh is not installed")
    marker = str(tmp_path / f"{launcher}.jsonl")
    hf = hostfile("127.0.0.1 slots=1\n127.0.0.2 slots=1\n")
    proc, pids = start_job([dsrun, "-H", hf, "--launcher", launcher, *sshd.ssh_args(), "--master_port", "29787",
                            "--comm_timeout", str(TIMEOUT), "--kill_grace", str(GRACE)], clean_env, marker)
    try:
        stopped_at = time.monotonic()
        os.kill(pids[1], signal.SIGSTOP)
        _, err = proc.communicate(timeout=60)
        elapsed = time.monotonic() - stopped_at
    finally:
        proc.kill()
    assert proc.returncode == 124, err
    assert "rank 1 on 127.0.0.2 made no progress for" in err and "rank 0 was waiting in" in err, err
    assert elapsed < TIMEOUT + GRACE + 1.5, f"{elapsed:.1f} s"
    assert wait_all_gone(list(pids.values()), within=0.5) == []
