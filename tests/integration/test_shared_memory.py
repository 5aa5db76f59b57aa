"""Collectives through shared memory among the ranks of one host, end to end through dsrun and
dsworker: chosen by itself and announced, trains to the same losses bit for bit as over TCP at
ZeRO stages 0 and 3 (all-reduce; reduce-scatter, all-gather), falls back to TCP when /dev/shm
cannot hold the segment, and leaves nothing in /dev/shm when a rank is killed."""
import json, os, shutil, signal, subprocess, time
import pytest

from conftest import ROOT, rank_pids, run
from throwaway_sshd import free_port

DSWORKER = os.environ.get("DSWORKER_BIN", os.path.join(ROOT, "build", "worker", "dsworker"))
CONFIG = os.path.join(ROOT, "configs", "mlp.json")


def losses(path):
    with open(path) as f:
        return [json.loads(line)["loss"] for line in f]


def config(tmp_path, stage):
    cfg = json.load(open(CONFIG))
    cfg["zero_optimization"] = {"stage": stage, "reduce_bucket_size": 5000}  # several buckets a step
    path = tmp_path / f"stage{stage}.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def train(dsrun, env, cfg, metrics, ranks=3, prefix=()):
    return run([*prefix, dsrun, "--master_port", str(free_port()), "--num_gpus", str(ranks), DSWORKER, "--model", "mlp", "--config", cfg,
                "--steps", "12", "--metrics", str(metrics)], dict(env, DSRUN_LOCAL_SLOTS=str(ranks)), timeout=120)


def segments_of(pid):
    """What rank `pid` (rank 0 makes the segment, /dev/shm/dsrun-<pid>-<random>) left in /dev/shm."""
    return [n for n in os.listdir("/dev/shm") if n.startswith(f"dsrun-{pid}-")]


@pytest.mark.parametrize("stage", [0, 3])
def test_local_ranks_use_shared_memory_with_the_losses_of_tcp(dsrun, clean_env, tmp_path, stage):
    cfg = config(tmp_path, stage)
    out = {}
    for shm in ("1", "0"):
        metrics = tmp_path / f"{shm}.jsonl"
        r = train(dsrun, dict(clean_env, DS_COMM_SHM=shm), cfg, metrics)
        assert r.returncode == 0, r.stderr
        transport = "shared memory" if shm == "1" else "TCP"
        assert f"dsworker: collectives over {transport}\n" in r.stderr, r.stderr
        out[shm] = losses(metrics)
    assert len(out["1"]) == 12 and out["1"] == out["0"]


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root for a private /dev/shm")
def test_a_dev_shm_too_small_for_the_segment_means_tcp(dsrun, clean_env, tmp_path):
    # A private mount namespace whose /dev/shm holds 1 MiB: the 8 MiB segment of 3 ranks cannot be
    # reserved, so every rank stays on TCP and trains as usual.
    cfg = config(tmp_path, 0)
    private_shm = ("unshare", "--mount", "--propagation", "private", "sh", "-c",
                   'mount -t tmpfs -o size=1m tmpfs /dev/shm && exec "$@"', "sh")
    probe = run([*private_shm, "true"], clean_env)
    if probe.returncode != 0:
        pytest.skip(f"no private /dev/shm here: {probe.stderr.strip()}")
    r = train(dsrun, clean_env, cfg, tmp_path / "small.jsonl", prefix=private_shm)
    assert r.returncode == 0, r.stderr
    assert "dsworker: collectives over TCP\n" in r.stderr, r.stderr
    reference = tmp_path / "reference.jsonl"
    assert train(dsrun, clean_env, cfg, reference).returncode == 0
    assert losses(tmp_path / "small.jsonl") == losses(reference)


def test_nothing_is_left_in_dev_shm_after_a_rank_is_killed(dsrun, clean_env, tmp_path):
    marker = tmp_path / "m.jsonl"
    proc = subprocess.Popen([dsrun, "--master_port", str(free_port()), "--num_gpus", "2", DSWORKER, "--model", "mlp", "--config", CONFIG,
                             "--epochs", "1000", "--metrics", str(marker)],
                            env=dict(clean_env, DSRUN_LOCAL_SLOTS="2"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() or marker.stat().st_size == 0:  # training, the segment mapped
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        ranks = rank_pids(str(marker), DSWORKER)
        assert segments_of(ranks[0]) == []  # unlinked once every rank had mapped it
        os.kill(ranks[1], signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode != 0
    assert "killed by SIGKILL" in err, err
    assert segments_of(ranks[0]) == []
