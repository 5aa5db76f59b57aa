"""dsrun --launcher openmpi and --launcher mpich with the real tools (Debian's OpenMPI mpirun and
MPICH's hydra mpiexec) over a throwaway OpenSSH server, 127.0.0.1 and 127.0.0.2 as two hosts: the
tool starts one agent per host (127.0.0.2's over ssh), dsrun reaches each over TCP with its
one-time key. The same losses as the ssh transport, ranks on their hosts with the rank
environment and none of the tool's own rank variables, --launcher_args reaching the tool, failure
propagation and cleanup, a missing tool named."""
import json, os, shutil, subprocess
import pytest

from conftest import PROBE, ROOT, job_pids, read_envs, run, wait_all_gone, wait_for_files

PY = "/usr/bin/python3"
DSWORKER = os.environ.get("DSWORKER_BIN", os.path.join(ROOT, "build", "worker", "dsworker"))
CONFIG = os.path.join(ROOT, "configs", "mlp.json")
TWO_HOSTS = "127.0.0.1 slots=2\n127.0.0.2 slots=1\n"
TOOLS = {"openmpi": "mpirun.openmpi", "mpich": "mpiexec.hydra"}
# The variables by which each tool tells a process its rank: they describe the agent, not the ranks.
TOOL_RANK_VARIABLES = {"openmpi": "OMPI_COMM_WORLD_RANK", "mpich": "PMI_RANK"}
# An extra argument each tool takes that sets a variable in the agents' (and so the ranks') environment.
SET_VARIABLE = {"openmpi": "-x DS_FROM_TOOL=yes", "mpich": "-genv DS_FROM_TOOL yes"}


@pytest.fixture(params=sorted(TOOLS))
def launcher(request):
    if not shutil.which(TOOLS[request.param]):
        pytest.fail(f"{TOOLS[request.param]} is missing: run scripts/install-deps.sh --tests")
    return request.param


def command(dsrun, launcher, sshd, hf, *args):
    return [dsrun, "-H", hf, "--launcher", launcher, *sshd.ssh_args(), *args]


def losses(path):
    with open(path) as f:
        return [json.loads(line)["loss"] for line in f]


def test_dsworker_trains_with_the_same_losses_as_over_ssh(launcher, dsrun, sshd, hostfile, clean_env, tmp_path):
    hf = hostfile("127.0.0.1 slots=1\n127.0.0.2 slots=1\n")
    train = [DSWORKER, "--model", "mlp", "--config", CONFIG, "--steps", "8", "--metrics"]
    out = {}
    for transport, port in (("ssh", 29771), (launcher, 29772)):
        m = tmp_path / f"{transport}.jsonl"
        r = run(command(dsrun, transport, sshd, hf, "--master_port", str(port), *train, str(m)), clean_env, timeout=120)
        assert r.returncode == 0, r.stderr
        assert f"via {transport}" in r.stderr
        out[transport] = losses(m)
    assert len(out[launcher]) == 8
    assert out[launcher] == out["ssh"]


def test_ranks_run_on_their_hosts_with_the_rank_environment(launcher, dsrun, sshd, hostfile, outdir, clean_env):
    r = run(command(dsrun, launcher, sshd, hostfile(TWO_HOSTS), "--launcher_args", SET_VARIABLE[launcher],
                    PY, PROBE, outdir, "a b"), clean_env)
    assert r.returncode == 0, r.stderr
    envs = read_envs(outdir)
    assert sorted(envs) == [0, 1, 2]
    for rank, e in envs.items():
        node = 0 if rank < 2 else 1
        assert (e["RANK"], e["WORLD_SIZE"], e["CROSS_RANK"]) == (str(rank), "3", str(node))
        # The tool starts 127.0.0.1's agent itself and 127.0.0.2's over ssh.
        assert ("SSH_CONNECTION" in e) == (node == 1)
        if node == 1:
            assert e["SSH_CONNECTION"].split()[2] == "127.0.0.2"
        assert TOOL_RANK_VARIABLES[launcher] not in e, "the tool's rank variable describes the agent, not the rank"
        assert e["DS_FROM_TOOL"] == "yes", "--launcher_args reached the tool"
        assert e["MASTER_ADDR"] == "127.0.0.1"
    with open(os.path.join(outdir, "argv.2.json")) as f:
        assert json.load(f)[2:] == ["a b"]
    for rank in range(3):
        host = "127.0.0.1" if rank < 2 else "127.0.0.2"
        assert f"{host}: [rank {rank}] hello stdout from rank {rank}" in r.stdout.splitlines()
        assert f"{host}: [rank {rank}] hello stderr from rank {rank}" in r.stderr.splitlines()


def test_a_failing_rank_stops_every_host(launcher, dsrun, sshd, hostfile, outdir, clean_env):
    r = run(command(dsrun, launcher, sshd, hostfile(TWO_HOSTS), PY, PROBE, outdir, "--child", "--sleep", "60",
                    "--fail-rank", "2", "--code", "3"), clean_env, timeout=40)
    assert r.returncode == 3, r.stderr
    assert "rank 2 on 127.0.0.2 exited with code 3" in r.stderr
    assert wait_all_gone(job_pids(outdir), within=2.0) == []


def test_agents_and_ranks_end_when_dsrun_is_killed(launcher, dsrun, sshd, hostfile, outdir, clean_env):
    proc = subprocess.Popen(command(dsrun, launcher, sshd, hostfile(TWO_HOSTS), "--kill_grace", "1", PY, PROBE,
                                    outdir, "--child", "--sleep", "120"),
                            env=clean_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_files(outdir, "pid.", 3)
        proc.kill()  # the agents see their TCP connections close; the tool loses its parent
        proc.wait()
        assert wait_all_gone(job_pids(outdir), within=10.0) == []
    finally:
        proc.kill()


def test_a_missing_tool_is_named(launcher, dsrun, sshd, hostfile, clean_env, tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    r = run(command(dsrun, launcher, sshd, hostfile(TWO_HOSTS), "true"), dict(clean_env, PATH=str(empty)), timeout=30)
    assert r.returncode == 1
    assert f"--launcher {launcher}: " in r.stderr and "is not installed" in r.stderr and str(empty) in r.stderr


def test_a_host_the_tool_cannot_take_is_an_input_error(launcher, dsrun, sshd, hostfile, clean_env):
    r = run(command(dsrun, launcher, sshd, hostfile("127.0.0.1 slots=1\nroot@127.0.0.2 slots=1\n"), "true"), clean_env)
    assert r.returncode == 2, r.stderr
    assert f"--launcher {launcher}: host 'root@127.0.0.2'" in r.stderr
