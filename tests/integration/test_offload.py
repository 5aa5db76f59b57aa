"""ZeRO-Infinity through dsworker: the optimizer state and (stage 3) the parameters on NVMe (here: the
machine's disk) give the in-memory run's losses, take their bytes out of the rank's memory, let a
model whose model states exceed a memory cgroup's limit train, leave no file behind, and fail
clearly on a bad nvme_path."""
import contextlib, json, os, re, subprocess

import pytest

from conftest import ROOT, run
from throwaway_sshd import free_port

DSWORKER = os.environ.get("DSWORKER_BIN", os.path.join(ROOT, "build", "worker", "dsworker"))
TWO = {"DSRUN_LOCAL_SLOTS": "2"}

# 8.5M parameters: with AdamW in fp32 at stage 1 on one rank, 64.7 MiB of moments.
BIG = {"train_micro_batch_size_per_gpu": 8, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
       "zero_optimization": {"stage": 1, "sub_group_size": 250000},
       "model": {"in_features": 1024, "hidden": 8192, "classes": 10, "num_samples": 256}}


# 7.6M parameters in 9 Linear layers (largest 1024x1024), stage 3 in fp32 on one rank: 116 MiB of
# model states in memory; the prefetch is kept small so that both runs hold few gathered layers.
DEEP = {"train_micro_batch_size_per_gpu": 8, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
        "zero_optimization": {"stage": 3, "sub_group_size": 250000, "stage3_prefetch_bucket_size": 2000000,
                              "stage3_param_persistence_threshold": 0},
        "model": {"in_features": 256, "hidden": 1024, "layers": 8, "classes": 10, "num_samples": 256}}


def write(tmp_path, name, cfg):
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return str(path)


def with_nvme(cfg, path, buffers=2):
    cfg = json.loads(json.dumps(cfg))
    cfg["zero_optimization"]["offload_optimizer"] = {"device": "nvme", "nvme_path": str(path), "buffer_count": buffers}
    return cfg


def with_infinity(cfg, path, buffers=2):
    """Both offloads to nvme: the optimizer state and the parameters (nothing kept in memory)."""
    cfg = with_nvme(cfg, path, buffers)
    cfg["zero_optimization"]["offload_param"] = {"device": "nvme", "nvme_path": str(path), "buffer_count": buffers,
                                                 "max_in_cpu": 0}
    return cfg


def mib(text, pattern):
    return float(re.search(pattern + r" ([\d.]+) MiB", text).group(1))


def two_rank_losses(dsrun, clean_env, tmp_path, cfg, offloaded, steps):
    """Runs `cfg` and `offloaded` through dsrun on 2 ranks for `steps` steps, asserts equal losses, and
    returns the offloaded run's result."""
    losses, result = {}, None
    for offload in (False, True):
        m = tmp_path / f"m{offload}.jsonl"
        r = run([dsrun, "--master_port", str(free_port()), "--num_gpus", "2", DSWORKER, "--model", "mlp", "--config",
                 write(tmp_path, f"c{offload}.json", offloaded if offload else cfg), "--steps", str(steps),
                 "--metrics", str(m)], dict(clean_env, **TWO), timeout=120)
        assert r.returncode == 0, r.stderr
        losses[offload] = [json.loads(line)["loss"] for line in m.read_text().splitlines()]
        result = r
    assert losses[True] == losses[False] and len(losses[True]) == steps
    return result


def test_zero_infinity_trains_two_ranks_with_the_in_memory_losses(dsrun, clean_env, tmp_path):
    """DeepSpeed's ZeRO-Infinity shape (stage 3, bf16, offload_optimizer to nvme, an aio block) on
    2 ranks: the same losses, bit for bit, as without offload; the I/O reported; nothing left."""
    swap = tmp_path / "swap"
    swap.mkdir()
    cfg = {"train_micro_batch_size_per_gpu": 8, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "bf16": {"enabled": True},
           "zero_optimization": {"stage": 3, "sub_group_size": 20000},
           "aio": {"block_size": 262144, "queue_depth": 16, "intra_op_parallelism": 1, "single_submit": False,
                   "overlap_events": True},
           "model": {"in_features": 64, "hidden": 512, "classes": 10, "num_samples": 800}}
    r = two_rank_losses(dsrun, clean_env, tmp_path, cfg, with_nvme(cfg, swap, buffers=4), 20)
    assert re.search(r"optimizer state [\d.]+ KiB \+ [\d.]+ KiB on NVMe", r.stderr), r.stderr
    assert re.search(r"NVMe offload per rank: read [\d.]+ MiB at [\d.]+ GB/s, wrote [\d.]+ MiB at [\d.]+ GB/s; "
                     r"waited [\d.]+ s for I/O", r.stdout), r.stdout
    assert os.listdir(swap) == []  # unnamed swap files: nothing to clean up


def test_parameters_on_nvme_train_two_ranks_with_the_in_memory_losses(dsrun, clean_env, tmp_path):
    """Stage 3 in bf16 with the parameters and the optimizer state on NVMe, 2 ranks, 2 micro-batches:
    the in-memory run's losses bit for bit; both swap files' I/O reported; nothing left."""
    swap = tmp_path / "swap"
    swap.mkdir()
    cfg = json.loads(json.dumps(DEEP))
    cfg.update({"bf16": {"enabled": True}, "gradient_accumulation_steps": 2})
    cfg["model"]["layers"] = 3
    r = two_rank_losses(dsrun, clean_env, tmp_path, cfg, with_infinity(cfg, swap, buffers=3), 8)
    assert re.search(r"params [\d.]+ MiB \+ [\d.]+ MiB on NVMe", r.stderr), r.stderr
    assert re.search(r"NVMe parameter offload per rank: read [\d.]+ MiB at [\d.]+ GB/s, wrote [\d.]+ MiB at "
                     r"[\d.]+ GB/s; waited [\d.]+ s for I/O", r.stdout), r.stdout
    assert os.listdir(swap) == []


def peak_rss_and_kept(clean_env, tmp_path, cfg, offloaded, kept_patterns):
    """{offload: peak RSS in MiB} and {offload: the model states in memory at start that
    `kept_patterns` name, in MiB}, for `cfg` and `offloaded` on one rank."""
    rss, kept = {}, {}
    for offload in (False, True):
        r = run([DSWORKER, "--model", "mlp", "--config", write(tmp_path, f"c{offload}.json", offloaded if offload else cfg),
                 "--steps", "3"], clean_env, timeout=120)
        assert r.returncode == 0, r.stderr
        rss[offload] = mib(r.stdout, "peak RSS")
        kept[offload] = sum(mib(r.stderr, pattern) for pattern in kept_patterns)
    return rss, kept


def test_peak_rss_falls_by_the_offloaded_state(clean_env, tmp_path):
    """One rank, fp32, stage 1: the 64.7 MiB of moments go to the swap file and two 1.9 MiB buffers
    stay; peak RSS must fall by at least 40% of the state's bytes (measured: 47%). Not by all of it:
    the offloaded run peaks while the parameters are initialised (the largest tensor's 32 MiB of
    initial values held), when the in-memory run's moments are still untouched zero pages (calloc'd),
    so there the two overlap; the in-memory run peaks at its model states plus the process."""
    rss, state = peak_rss_and_kept(clean_env, tmp_path, BIG, with_nvme(BIG, tmp_path), ["optimizer state"])
    assert state[True] < 0.1 * state[False]
    assert rss[False] - rss[True] >= 0.4 * state[False], (rss, state)


def test_peak_rss_falls_by_the_offloaded_parameters_and_state(clean_env, tmp_path):
    """One rank, fp32, stage 3, both offloads: the parameters (29 MiB) and the moments (58 MiB) leave
    memory but for the buffers; peak RSS must fall by at least 90% of what left (measured: ~100%)."""
    rss, kept = peak_rss_and_kept(clean_env, tmp_path, DEEP, with_infinity(DEEP, tmp_path),
                                  ["at start: params", "optimizer state"])
    assert kept[False] - kept[True] > 70, kept
    assert rss[False] - rss[True] >= 0.9 * (kept[False] - kept[True]), (rss, kept)


@contextlib.contextmanager
def memory_cgroup(limit_bytes):
    """A child of this process's memory cgroup (v1) limited to `limit_bytes`, swap included."""
    line = next((l for l in open("/proc/self/cgroup").read().splitlines() if ":memory:" in l), None)
    base = f"/sys/fs/cgroup/memory{line.split(':', 2)[2]}" if line else None
    if base is None or not os.access(base, os.W_OK):
        pytest.skip("no writable cgroup v1 memory controller here")
    path = os.path.join(base, f"dsworker-test-{os.getpid()}")
    os.makedirs(path, exist_ok=True)
    try:
        with open(os.path.join(path, "memory.limit_in_bytes"), "w") as f:
            f.write(str(limit_bytes))
        for name, value in (("memory.memsw.limit_in_bytes", limit_bytes), ("memory.swappiness", 0)):
            if os.path.exists(os.path.join(path, name)):  # no escape into swap
                with open(os.path.join(path, name), "w") as f:
                    f.write(str(value))
        yield path
    finally:
        os.rmdir(path)


def assert_only_offload_fits(clean_env, tmp_path, limit_mib, cfg, offloaded):
    """Under a memory cgroup of `limit_mib`, `cfg` is killed for memory and `offloaded` trains to the end."""
    with memory_cgroup(limit_mib << 20) as cgroup:
        rcs = {}
        for offload in (False, True):
            in_cgroup = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', cgroup]
            r = run(in_cgroup + [DSWORKER, "--model", "mlp", "--config",
                                 write(tmp_path, f"c{offload}.json", offloaded if offload else cfg), "--steps", "3"],
                    clean_env, timeout=120)
            rcs[offload] = r.returncode
            if offload:
                assert "done: 3 steps" in r.stdout, r.stderr
    assert rcs == {False: -9, True: 0}


def test_a_model_whose_states_exceed_the_memory_limit_trains_with_offload(clean_env, tmp_path):
    """Under a 125 MiB cgroup, the run whose model states are 129 MiB (plus the process) is killed
    for memory; with the optimizer state on NVMe the same run (peak RSS about 116 MiB) trains to the end."""
    assert_only_offload_fits(clean_env, tmp_path, 125, BIG, with_nvme(BIG, tmp_path))


def test_a_stage_3_model_past_the_memory_limit_trains_with_its_parameters_on_nvme(clean_env, tmp_path):
    """Under a 110 MiB cgroup, DEEP's 116 MiB of model states are killed for memory; with the
    parameters and the optimizer state on NVMe the same run trains to the end."""
    assert_only_offload_fits(clean_env, tmp_path, 110, DEEP, with_infinity(DEEP, tmp_path))


def test_bad_nvme_paths_are_clear_errors(clean_env, tmp_path):
    missing = tmp_path / "missing"
    plain = tmp_path / "plain"
    plain.write_text("")
    for path, message in ((missing, "No such file or directory"), (plain, "is not a directory")):
        r = run([DSWORKER, "--model", "mlp", "--config", write(tmp_path, "c.json", with_nvme(BIG, path)), "--steps", "1"],
                clean_env, timeout=60)
        assert r.returncode == 2, r.stderr
        assert f'zero_optimization.offload_optimizer.nvme_path (rank 0): "{path}"' in r.stderr and message in r.stderr
        params_only = with_infinity(DEEP, path)
        del params_only["zero_optimization"]["offload_optimizer"]
        r = run([DSWORKER, "--model", "mlp", "--config", write(tmp_path, "c.json", params_only), "--steps", "1"],
                clean_env, timeout=60)
        assert r.returncode == 2, r.stderr
        assert f'zero_optimization.offload_param.nvme_path (rank 0): "{path}"' in r.stderr and message in r.stderr
    small = tmp_path / "small"
    small.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(small)], capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here")
    try:
        r = run([DSWORKER, "--model", "mlp", "--config", write(tmp_path, "c.json", with_nvme(BIG, small)), "--steps", "1"],
                clean_env, timeout=60)
        assert r.returncode == 2, r.stderr
        assert re.search(rf'"{small}" has [\d.]+ MiB free, but the swap file needs 6\d\.\d MiB', r.stderr), r.stderr
    finally:
        subprocess.run(["umount", str(small)], check=True)


def test_aio_bench_measures_the_disk(clean_env, tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    r = run([DSWORKER, "--aio_bench", str(disk), "--aio_bench_mib", "8"], clean_env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert len(re.findall(r"^\s+\d+\s+\d+\s+(true|false)\s+[\d.]+\s+[\d.]+$", r.stdout, re.M)) == 12
    assert re.search(r'best \(write \+ read\): "aio": \{"block_size": \d+, "queue_depth": \d+', r.stdout)
    assert os.listdir(disk) == []
