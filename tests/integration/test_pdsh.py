"""dsrun --launcher pdsh over a throwaway OpenSSH server (127.0.0.1 and 127.0.0.2 as two hosts):
one pdsh run starts every agent, which dsrun then reaches over TCP with a one-time key (pdsh gives
remote commands no stdin). The same losses as the ssh transport, the rank environment and hostile
values byte-exact, failure propagation and cleanup, --launcher_args reaching pdsh, a missing pdsh."""
import json, os, shutil, signal, subprocess, time
import pytest

from conftest import PROBE, ROOT, job_pids, read_envs, run, wait_all_gone, wait_for_files

PY = "/usr/bin/python3"
DSWORKER = os.environ.get("DSWORKER_BIN", os.path.join(ROOT, "build", "worker", "dsworker"))
CONFIG = os.path.join(ROOT, "configs", "mlp.json")
TWO_HOSTS = "127.0.0.1 slots=2\n127.0.0.2 slots=2\n"

pytestmark = pytest.mark.skipif(not shutil.which("pdsh"), reason="pdsh is not installed (scripts/install-deps.sh)")


def pdsh(dsrun, sshd, hf, *args):
    return [dsrun, "-H", hf, "--launcher", "pdsh", *sshd.ssh_args(), *args]


def losses(path):
    with open(path) as f:
        return [json.loads(line)["loss"] for line in f]


def test_dsworker_trains_with_the_same_losses_as_over_ssh(dsrun, sshd, hostfile, clean_env, tmp_path):
    hf = hostfile("127.0.0.1 slots=1\n127.0.0.2 slots=1\n")
    train = [DSWORKER, "--model", "mlp", "--config", CONFIG, "--steps", "12", "--metrics"]
    out = {}
    for launcher, port in (("ssh", 29761), ("pdsh", 29762)):
        m = tmp_path / f"{launcher}.jsonl"
        r = run([dsrun, "-H", hf, "--launcher", launcher, *sshd.ssh_args(), "--master_port", str(port), *train, str(m)],
                clean_env, timeout=120)
        assert r.returncode == 0, r.stderr
        assert f"via {launcher}" in r.stderr
        out[launcher] = losses(m)
    assert len(out["pdsh"]) == 12
    assert out["pdsh"] == out["ssh"]


def test_ranks_run_on_their_hosts_with_exact_environment(dsrun, sshd, hostfile, outdir, clean_env):
    awkward = "a b 'single' \"double\" $HOME `id` ; echo x && \\ %n %h"
    r = run(pdsh(dsrun, sshd, hostfile(TWO_HOSTS), "--export", f"EXP_AWK={awkward}", PY, PROBE, outdir, "a b", "$HOME"),
            dict(clean_env, NCCL_AWKWARD=awkward))
    assert r.returncode == 0, r.stderr
    envs = read_envs(outdir)
    assert sorted(envs) == [0, 1, 2, 3]
    tokens = {e["DS_JOB_TOKEN"] for e in envs.values()}
    assert len(tokens) == 1
    for rank, e in envs.items():
        node = rank // 2
        assert (e["RANK"], e["WORLD_SIZE"], e["CROSS_RANK"]) == (str(rank), "4", str(node))
        assert e["SSH_CONNECTION"].split()[2] == f"127.0.0.{node + 1}", "each rank ran on its own host, over ssh"
        assert e["EXP_AWK"] == awkward and e["NCCL_AWKWARD"] == awkward
        assert e["MASTER_ADDR"] == "127.0.0.1"
    with open(os.path.join(outdir, "argv.3.json")) as f:
        assert json.load(f)[2:] == ["a b", "$HOME"]
    for rank in range(4):
        host = f"127.0.0.{rank // 2 + 1}"
        assert f"{host}: [rank {rank}] hello stdout from rank {rank}" in r.stdout.splitlines()
        assert f"{host}: [rank {rank}] hello stderr from rank {rank}" in r.stderr.splitlines()


def test_a_failing_rank_stops_every_host(dsrun, sshd, hostfile, outdir, clean_env):
    start = time.monotonic()
    r = run(pdsh(dsrun, sshd, hostfile(TWO_HOSTS), PY, PROBE, outdir, "--child", "--sleep", "60",
                 "--fail-rank", "2", "--code", "3"), clean_env)
    assert r.returncode == 3, r.stderr
    assert "rank 2 on 127.0.0.2 exited with code 3" in r.stderr
    assert time.monotonic() - start < 20
    assert wait_all_gone(job_pids(outdir), within=1.0) == []


def test_agents_clean_up_when_dsrun_is_killed(dsrun, sshd, hostfile, outdir, clean_env):
    proc = subprocess.Popen(pdsh(dsrun, sshd, hostfile(TWO_HOSTS), "--kill_grace", "1", PY, PROBE, outdir, "--child",
                                 "--sleep", "120"), env=clean_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_files(outdir, "pid.", 4)
        proc.kill()  # the agents see their TCP connections close
        proc.wait()
        assert wait_all_gone(job_pids(outdir), within=5.0) == []
    finally:
        proc.kill()


def test_launcher_args_reach_pdsh(dsrun, sshd, hostfile, clean_env):
    # pdsh's -x drops a host from its -w list: that host's agent never starts, and dsrun says so
    # when the connect time (2 x --ssh_timeout + 5 s) is up.
    start = time.monotonic()
    r = run(pdsh(dsrun, sshd, hostfile(TWO_HOSTS), "--ssh_timeout", "2", "--launcher_args", "-x 127.0.0.2", "true"),
            clean_env, timeout=60)
    assert r.returncode == 1, r.stderr
    assert "127.0.0.2: no answer from the agent within 9 s" in r.stderr, r.stderr
    assert time.monotonic() - start < 20


def test_a_missing_pdsh_is_named(dsrun, sshd, hostfile, clean_env, tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    r = run(pdsh(dsrun, sshd, hostfile(TWO_HOSTS), "true"), dict(clean_env, PATH=str(empty)), timeout=30)
    assert r.returncode == 1
    assert "--launcher pdsh: pdsh is not installed" in r.stderr and str(empty) in r.stderr


def test_an_unreachable_host_is_a_clear_error(dsrun, sshd, hostfile, clean_env):
    r = run(pdsh(dsrun, sshd, hostfile("127.0.0.1 slots=1\n127.0.0.9 slots=1\n"), "true"), clean_env, timeout=60)
    assert r.returncode == 1, r.stderr
    assert "127.0.0.9" in r.stderr and "Connection refused" in r.stderr
