"""`dsrun --no_ssh --node_rank N`: the user starts dsrun on every node by hand. Two dsrun processes
for the "hosts" 127.0.0.1 and 127.0.0.2 train the same dsworker job as one dsrun does, with the same
losses; nodes started with different hostfiles stop at the rendezvous naming both world sizes."""
import json, os, subprocess, time
import pytest

from conftest import ROOT, run

DSWORKER = os.environ.get("DSWORKER_BIN", os.path.join(ROOT, "build", "worker", "dsworker"))
CONFIG = os.path.join(ROOT, "configs", "mlp.json")
TWO_NODES = "127.0.0.1 slots=1\n127.0.0.2 slots=1\n"


def losses(path):
    with open(path) as f:
        return [json.loads(line)["loss"] for line in f]


def start_nodes(dsrun, env, hostfiles, port, program):
    """One `dsrun --no_ssh --node_rank N` per hostfile, as a user would start them on each node."""
    return [subprocess.Popen([dsrun, "-H", hf, "--no_ssh", "--node_rank", str(n), "--master_addr", "127.0.0.1",
                              "--master_port", str(port), "--comm_timeout", "30", *program],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for n, hf in enumerate(hostfiles)]


def finish(procs, within):
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=within)
            results.append((p.returncode, out, err))
    finally:
        for p in procs:
            p.kill()
    return results


def test_two_nodes_started_by_hand_train_as_one_dsrun(dsrun, hostfile, clean_env, tmp_path):
    train = [DSWORKER, "--model", "mlp", "--config", CONFIG, "--steps", "12", "--metrics"]
    one = tmp_path / "one.jsonl"
    r = run([dsrun, "--num_gpus", "2", "--master_port", "29741", *train, str(one)],
            dict(clean_env, DSRUN_LOCAL_SLOTS="2"), timeout=120)
    assert r.returncode == 0, r.stderr

    split = tmp_path / "split.jsonl"
    hf = hostfile(TWO_NODES)
    env = dict(clean_env, DS_JOB_TOKEN="shared-secret-of-this-job")
    results = finish(start_nodes(dsrun, env, [hf, hf], 29742, [*train, str(split)]), within=120)
    for code, out, err in results:
        assert code == 0, err
    node0, node1 = results
    assert "[rank 0] done: 12 steps" in node0[1]
    assert "--no_ssh: node 1 of 2 (127.0.0.2), ranks 1..1 of 2" in node1[2]
    assert losses(split) == losses(one), "the same job, started by hand on two nodes, trains bit-identically"


def test_nodes_with_different_hostfiles_stop_at_the_rendezvous(dsrun, hostfile, clean_env, tmp_path):
    a = tmp_path / "a"
    a.write_text(TWO_NODES)
    b = tmp_path / "b"
    b.write_text("127.0.0.1 slots=1\n127.0.0.2 slots=2\n")  # node 1 thinks the world has 3 ranks
    program = [DSWORKER, "--model", "mlp", "--config", CONFIG, "--steps", "3"]
    start = time.monotonic()
    results = finish(start_nodes(dsrun, clean_env, [str(a), str(b)], 29743, program), within=60)
    elapsed = time.monotonic() - start
    assert all(code != 0 for code, _, _ in results), results
    both = results[0][2] + results[1][2]
    assert "WORLD_SIZE=3" in both and "WORLD_SIZE=2" in both, both
    assert "every node must use the same hostfile and selection" in results[0][2], "node 0 is told too"
    assert elapsed < 20, f"{elapsed:.1f} s: a mismatch must not wait out the timeout (30 s)"


def test_same_world_size_but_other_hosts_is_a_mismatch_too(dsrun, clean_env, tmp_path):
    a = tmp_path / "a"
    a.write_text(TWO_NODES)
    b = tmp_path / "b"
    b.write_text("127.0.0.1 slots=1\n127.0.0.3 slots=1\n")
    program = [DSWORKER, "--model", "mlp", "--config", CONFIG, "--steps", "3"]
    results = finish(start_nodes(dsrun, clean_env, [str(a), str(b)], 29744, program), within=60)
    assert all(code != 0 for code, _, _ in results), results
    assert "dsrun plan" in results[1][2] and "WORLD_SIZE=2 (dsrun plan" in results[1][2]


@pytest.mark.parametrize("args,message", [
    (["--node_rank", "1"], "--node_rank 1 needs --no_ssh"),
    (["--no_ssh"], "--no_ssh needs --node_rank: this node's index among the 2 selected hosts (0..1)"),
    (["--no_ssh", "--node_rank", "2"], "--node_rank 2: the selection has 2 hosts (0..1)"),
    (["--no_ssh", "--node_rank", "0", "--launcher", "ssh"], "--no_ssh conflicts with --launcher ssh"),
])
def test_bad_node_rank_is_a_usage_error(dsrun, hostfile, clean_env, args, message):
    r = run([dsrun, "-H", hostfile(TWO_NODES), "--dry_run", *args, "true"], clean_env)
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_dry_run_shows_only_this_nodes_ranks(dsrun, hostfile, clean_env):
    r = run([dsrun, "-H", hostfile(TWO_NODES), "--dry_run", "--format", "json", "--no_ssh", "--node_rank", "1",
             "true"], clean_env)
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["world_size"] == 2 and plan["master_addr"] == "127.0.0.1" and plan["transport"] == "local"
    assert [n["host"] for n in plan["nodes"]] == ["127.0.0.2"]
    assert plan["nodes"][0]["ranks"][0]["rank"] == 1
