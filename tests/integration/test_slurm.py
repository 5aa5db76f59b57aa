"""dsrun and Slurm, on a throwaway cluster (scripts/throwaway_slurm.py: munged, slurmctld and two
slurmd, nodes 127.0.0.1 and 127.0.0.2). --launcher slurm starts one agent per node in one srun step;
inside an allocation (sbatch) dsrun takes its hosts and slots from SLURM_JOB_NODELIST and
SLURM_TASKS_PER_NODE and uses srun by default; dsrun run by srun as one of several tasks is an
error, or with --no_ssh starts its own node's ranks. Needs root and Debian's Slurm and munge."""
import json, os, subprocess, sys
import pytest

from conftest import PROBE, ROOT, job_pids, read_envs, run, wait_all_gone, wait_for_files

sys.path.insert(0, os.path.join(ROOT, "scripts"))
from throwaway_slurm import ThrowawaySlurm, missing_programs  # noqa: E402

PY = "/usr/bin/python3"
DSWORKER = os.environ.get("DSWORKER_BIN", os.path.join(ROOT, "build", "worker", "dsworker"))
CONFIG = os.path.join(ROOT, "configs", "mlp.json")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("slurmd must run as root")
    if missing_programs():
        pytest.fail(f"{', '.join(missing_programs())} missing: run scripts/install-deps.sh --tests")
    with ThrowawaySlurm(2, str(tmp_path_factory.mktemp("slurm"))) as cluster:
        yield cluster


@pytest.fixture
def env(slurm, clean_env):
    return slurm.env({k: v for k, v in clean_env.items() if not k.startswith(("SLURM_", "OMPI_", "PMI_"))})


def losses(path):
    with open(path) as f:
        return [json.loads(line)["loss"] for line in f]


def test_launcher_slurm_starts_each_nodes_ranks_there(dsrun, slurm, env, hostfile, outdir):
    r = run([dsrun, "-H", hostfile("127.0.0.1 slots=2\n127.0.0.2 slots=1\n"), "--launcher", "slurm",
             PY, PROBE, outdir, "a b"], env)
    assert r.returncode == 0, r.stderr
    assert "via slurm" in r.stderr
    envs = read_envs(outdir)
    assert sorted(envs) == [0, 1, 2]
    for rank, e in envs.items():
        node = "127.0.0.1" if rank < 2 else "127.0.0.2"
        assert e["SLURMD_NODENAME"] == node, "each rank ran under its own node's slurmd"
        assert (e["RANK"], e["WORLD_SIZE"]) == (str(rank), "3")
        assert "SLURM_PROCID" not in e, "srun's task rank describes the agent, not the rank"
        assert e["SLURM_JOB_ID"], "the job's own variables stay"
    for rank in range(3):
        node = "127.0.0.1" if rank < 2 else "127.0.0.2"
        assert f"{node}: [rank {rank}] hello stdout from rank {rank}" in r.stdout.splitlines()


def test_the_hostfile_order_holds_though_slurm_sorts_its_nodes(dsrun, slurm, env, hostfile, outdir):
    r = run([dsrun, "-H", hostfile("127.0.0.2 slots=1\n127.0.0.1 slots=1\n"), "--launcher", "slurm",
             PY, PROBE, outdir], env)
    assert r.returncode == 0, r.stderr
    envs = read_envs(outdir)
    assert envs[0]["SLURMD_NODENAME"] == "127.0.0.2" and envs[1]["SLURMD_NODENAME"] == "127.0.0.1"
    assert envs[0]["MASTER_ADDR"] == "127.0.0.2"


@pytest.mark.parametrize("allocator", ["sbatch", "salloc"])
def test_inside_an_allocation_the_hosts_and_slots_come_from_slurm(allocator, dsrun, slurm, env, tmp_path):
    metrics = tmp_path / "m.jsonl"
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/sh\nexec {dsrun} --master_port 29781 {DSWORKER} --model mlp --config {CONFIG} "
                      f"--steps 6 --metrics {metrics}\n")
    script.chmod(0o755)
    log = tmp_path / "job.out"
    if allocator == "sbatch":  # the script runs on the first node, its output in a file
        r = run(["sbatch", "--wait", "-N", "2", "--ntasks-per-node", "2", "-o", str(log), str(script)], env,
                timeout=120)
        out = log.read_text()
    else:  # the script runs here, in the allocation's environment
        r = run(["salloc", "-N", "2", "--ntasks-per-node", "2", str(script)], env, timeout=120)
        out = r.stderr
    assert r.returncode == 0, r.stderr + out
    assert "no hostfile: the Slurm allocation of job" in out and "SLURM_JOB_NODELIST=127.0.0.[1-2]" in out
    assert "4 ranks on 2 host(s) via slurm" in out
    assert len(losses(metrics)) == 6
    # The same job from a hostfile over the local transport gives the same losses.
    hf = tmp_path / "hf"
    hf.write_text("localhost slots=4\n")
    local = tmp_path / "local.jsonl"
    r = run([dsrun, "-H", str(hf), "--master_port", "29782", DSWORKER, "--model", "mlp", "--config", CONFIG,
             "--steps", "6", "--metrics", str(local)], env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert losses(metrics) == losses(local)


def test_dsrun_as_one_of_several_srun_tasks_is_an_error(dsrun, slurm, env):
    r = run(["srun", "-N", "2", "-n", "2", dsrun, "true"], env, timeout=60)
    assert r.returncode != 0
    assert "dsrun runs as task 0 of 2 (SLURM_PROCID): each task would start the whole job" in r.stderr, r.stderr
    assert "add --no_ssh" in r.stderr


def test_with_no_ssh_each_srun_task_starts_its_own_nodes_ranks(dsrun, slurm, env, outdir):
    r = run(["srun", "-N", "2", "-n", "2", "--label", dsrun, "--no_ssh", "--master_port", "29783",
             PY, PROBE, outdir], env, timeout=60)
    assert r.returncode == 0, r.stderr
    envs = read_envs(outdir)
    assert sorted(envs) == [0, 1]
    assert [envs[r]["SLURMD_NODENAME"] for r in (0, 1)] == ["127.0.0.1", "127.0.0.2"]
    assert "--no_ssh: node 1 of 2 (127.0.0.2)" in r.stderr


def test_a_failing_rank_stops_every_node(dsrun, slurm, env, hostfile, outdir):
    r = run([dsrun, "-H", hostfile("127.0.0.1 slots=1\n127.0.0.2 slots=1\n"), "--launcher", "slurm",
             PY, PROBE, outdir, "--child", "--sleep", "60", "--fail-rank", "1", "--code", "5"], env, timeout=40)
    assert r.returncode == 5, r.stderr
    assert "rank 1 on 127.0.0.2 exited with code 5" in r.stderr
    assert wait_all_gone(job_pids(outdir), within=2.0) == []


def test_a_node_slurm_does_not_know_is_refused_by_srun(dsrun, slurm, env, hostfile):
    r = run([dsrun, "-H", hostfile("127.0.0.1 slots=1\n127.0.0.3 slots=1\n"), "--launcher", "slurm", "--ssh_timeout",
             "2", "true"], env, timeout=60)
    assert r.returncode == 1, r.stderr
    # srun's own words vary ("... 127.0.0.3 ..." or "Invalid node name specified"); they are relayed.
    assert "dsrun: slurm: srun: error:" in r.stderr, r.stderr
    assert "slurm ended (exited with code 1) before starting any agent; its own messages are above" in r.stderr


def test_every_process_ends_when_dsrun_is_killed(dsrun, slurm, env, hostfile, outdir):
    proc = subprocess.Popen([dsrun, "-H", hostfile("127.0.0.1 slots=2\n127.0.0.2 slots=1\n"), "--launcher", "slurm",
                             "--kill_grace", "1", PY, PROBE, outdir, "--child", "--sleep", "120"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_files(outdir, "pid.", 3)
        proc.kill()  # srun goes with it; the agents see their connections close and stop their ranks
        proc.wait()
        assert wait_all_gone(job_pids(outdir), within=10.0) == []
    finally:
        proc.kill()
