"""Configs as users bring them run unchanged through dsworker: DeepSpeed's getting-started config
(ZeRO-Offload to the CPU), a Hugging Face Trainer config with "auto" everywhere, a config without
an optimizer, and a broken config whose every problem is reported in one run with its line."""
import json, os, re

import pytest

from conftest import ROOT, run
from throwaway_sshd import free_port

DSWORKER = os.environ.get("DSWORKER_BIN", os.path.join(ROOT, "build", "worker", "dsworker"))
TWO = {"DSRUN_LOCAL_SLOTS": "2"}

HF_ZERO3 = {
    "fp16": {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16,
             "hysteresis": 2, "min_loss_scale": 1},
    "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                                                      "warmup_num_steps": "auto", "total_num_steps": "auto"}},
    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True},
                          "offload_param": {"device": "cpu", "pin_memory": True}, "overlap_comm": True,
                          "contiguous_gradients": True, "sub_group_size": 1e9, "reduce_bucket_size": "auto",
                          "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto",
                          "stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9,
                          "stage3_gather_16bit_weights_on_model_save": True},
    "gradient_accumulation_steps": "auto", "gradient_clipping": "auto", "steps_per_print": 5,
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "wall_clock_breakdown": False,
    "model": {"in_features": 32, "hidden": 96, "classes": 10, "num_samples": 640},
}


def write(tmp_path, name, cfg):
    path = tmp_path / name
    path.write_text(cfg if isinstance(cfg, str) else json.dumps(cfg, indent=1))
    return str(path)


def metrics(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def test_deepspeeds_getting_started_config_with_cpu_offload_trains_unchanged(dsrun, clean_env, tmp_path):
    cfg = {"train_batch_size": 32, "optimizer": {"type": "Adam", "params": {"lr": 0.001, "betas": [0.9, 0.999]}},
           "fp16": {"enabled": True, "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16},
           "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
           "model": {"in_features": 32, "hidden": 128, "classes": 10}}
    m = tmp_path / "m.jsonl"
    r = run([dsrun, "--master_port", str(free_port()), "--num_gpus", "2", DSWORKER, "--model", "mlp", "--config", write(tmp_path, "c.json", cfg),
             "--epochs", "3", "--metrics", str(m)], dict(clean_env, **TWO), timeout=120)
    assert r.returncode == 0, r.stderr
    assert "offload_optimizer: device \"cpu\": on CPU ranks the optimizer state already lives in host memory" in r.stderr
    losses = [row["loss"] for row in metrics(m)]
    assert len(losses) == 3 * (1000 // 32) and losses[-1] < 0.9 * losses[0]


def test_hugging_face_auto_config_prints_what_each_auto_became(clean_env, tmp_path):
    path = write(tmp_path, "hf.json", HF_ZERO3)
    r = run([DSWORKER, "--model", "mlp", "--config", path, "--print_config", "--bf16", "--lr", "3e-4",
             "--train_micro_batch_size_per_gpu", "4", "--steps", "40"], dict(clean_env, WORLD_SIZE="2"), timeout=60)
    assert r.returncode == 0, r.stderr
    c = json.loads(r.stdout)
    assert (c["train_micro_batch_size_per_gpu"], c["gradient_accumulation_steps"], c["train_batch_size"]) == (4, 1, 8)
    assert c["bf16"]["enabled"] is True and c["fp16"]["enabled"] is False
    assert c["optimizer"]["params"]["lr"] == 3e-4 and c["optimizer"]["params"]["weight_decay"] == 0.0
    assert c["scheduler"]["params"]["warmup_max_lr"] == 3e-4 and c["scheduler"]["params"]["total_num_steps"] == 40
    assert c["gradient_clipping"] == 1.0
    h = 96  # the mlp's widest activation
    z = c["zero_optimization"]
    assert (z["reduce_bucket_size"], z["stage3_prefetch_bucket_size"], z["stage3_param_persistence_threshold"]) == \
        (h * h, int(0.9 * h * h), 10 * h)
    assert re.search(r'hf\.json:\d+: train_batch_size: "auto" -> 8 \(world size 2 x micro batch 4 x accumulation 1\)',
                     r.stderr)
    assert 'optimizer.params.lr: "auto" -> 0.0003 (from --lr)' in r.stderr
    # Without --steps the run's length is known only when training starts.
    r = run([DSWORKER, "--model", "mlp", "--config", path, "--print_config"], clean_env, timeout=60)
    assert json.loads(r.stdout)["scheduler"]["params"]["total_num_steps"] == "auto"


def test_hugging_face_auto_config_trains_on_two_ranks(dsrun, clean_env, tmp_path):
    m = tmp_path / "m.jsonl"
    r = run([dsrun, "--master_port", str(free_port()), "--num_gpus", "2", DSWORKER, "--model", "mlp", "--config", write(tmp_path, "hf.json", HF_ZERO3),
             "--bf16", "--lr", "3e-3", "--warmup_steps", "5", "--epochs", "2", "--metrics", str(m)],
            dict(clean_env, **TWO), timeout=120)
    assert r.returncode == 0, r.stderr
    rows = metrics(m)
    assert len(rows) == 2 * (320 // 8)  # 640 samples / 2 ranks / micro 8 (the Trainer's default)
    assert 'total_num_steps: "auto" -> 80 (the run\'s length)' in r.stderr
    assert rows[-1]["lr"] < rows[len(rows) // 2]["lr"]  # WarmupDecayLR decays to 0 at step 80
    assert rows[-1]["loss"] < 0.9 * rows[0]["loss"]


def test_a_config_without_an_optimizer_trains_with_adamw(clean_env, tmp_path):
    m = tmp_path / "m.jsonl"
    cfg = {"train_micro_batch_size_per_gpu": 16, "model": {"in_features": 32, "hidden": 64, "classes": 10}}
    r = run([DSWORKER, "--model", "mlp", "--config", write(tmp_path, "c.json", cfg), "--lr", "0.002", "--steps", "30",
             "--metrics", str(m)], clean_env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "no optimizer section: AdamW with lr 0.002 (--lr)" in r.stderr
    rows = metrics(m)
    assert all(row["lr"] == 0.002 for row in rows) and rows[-1]["loss"] < rows[0]["loss"]


def test_every_problem_of_a_config_in_one_run_with_its_line(clean_env, tmp_path):
    text = """{
  "train_batch_size": 16,
  "optimizer": {"type": "Adam", "params": {"lr": -1, "betaz": [0.9, 0.99]}},
  "fp16": {"enabled": "yes", "loss_scale_windw": 100},
  "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme"}, "reduce_bucket_sz": 5},
  "gradient_clipping": "abc",
  "cuda_visible_devices": "0,1"
}
"""
    path = write(tmp_path, "bad.json", text)
    for extra in ([], ["--print_config"]):
        r = run([DSWORKER, "--model", "mlp", "--config", path, "--steps", "1"] + extra, clean_env, timeout=60)
        assert r.returncode == 2
        errors = [l for l in r.stderr.splitlines() if l.startswith("dsworker: error: ")]
        assert errors == [
            f"dsworker: error: {path}:6: gradient_clipping: \"abc\" is not a number",
            f"dsworker: error: {path}:3: optimizer.params.lr: -1 must be >= 0",
            f"dsworker: error: {path}:3: optimizer.params.betaz: unknown key (did you mean 'betas'?)",
            f"dsworker: error: {path}:4: fp16.enabled: \"yes\" is not a boolean (true or false)",
            f"dsworker: error: {path}:4: fp16.loss_scale_windw: unknown key (did you mean 'loss_scale_window'?)",
            f"dsworker: error: {path}:5: zero_optimization.reduce_bucket_sz: unknown key (did you mean 'reduce_bucket_size'?)",
            f"dsworker: error: {path}:5: zero_optimization.offload_optimizer.nvme_path: required with device \"nvme\": "
            "the directory for the swap files",
        ], r.stderr
        assert f"dsworker: warning: {path}:7: cuda_visible_devices: unknown key, ignored as DeepSpeed does" in r.stderr
        assert f"dsworker: 7 errors in {path}" in r.stderr


def test_bf16_skips_a_non_finite_step_unless_check_grad_overflow_is_off(clean_env, tmp_path):
    """DeepSpeed >= 0.19.3: bf16.check_grad_overflow defaults to true and skips such a step; off, dsworker
    stops (DeepSpeed would apply the non-finite update)."""
    with open(os.path.join(ROOT, "configs", "bf16.json")) as f:
        cfg = json.load(f)
    cfg["model"]["inject_nonfinite_grad_steps"] = [3, 4]
    m = tmp_path / "m.jsonl"
    r = run([DSWORKER, "--model", "mlp", "--config", write(tmp_path, "on.json", cfg), "--steps", "6", "--metrics", str(m)],
            clean_env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert [row["step"] for row in metrics(m) if row["skipped"]] == [3, 4]
    assert "step 3: overflow (gradient norm inf), skipping" in r.stdout and "2 skipped on overflow" in r.stdout
    cfg["bf16"]["check_grad_overflow"] = False
    r = run([DSWORKER, "--model", "mlp", "--config", write(tmp_path, "off.json", cfg), "--steps", "6"], clean_env,
            timeout=60)
    assert r.returncode == 1 and "step 3: the gradient norm is inf; bf16 training has no loss scaling" in r.stderr


def test_deepspeeds_bf16_master_weights_config_trains_with_a_third_of_the_optimizer_memory(dsrun, clean_env, tmp_path):
    """DeepSpeed's own test config for bf16 master weights and gradients with bf16 optimizer states
    (test_bf16.py's TestBF16MasterWeightsGradients, ZeRO-2 on 2 ranks): no fp32 master copy, bf16
    Adam moments, so 4 bytes per partition element of optimizer state instead of 12."""
    cfg = {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1, "steps_per_print": 1,
           "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
           "bf16": {"enabled": True, "bf16_master_weights_and_grads": True, "bf16_optimizer_states": True},
           "zero_optimization": {"stage": 2}, "model": {"in_features": 32, "hidden": 128, "classes": 10}}
    state_bytes = {}
    for low in (True, False):
        if not low:
            del cfg["bf16"]["bf16_master_weights_and_grads"], cfg["bf16"]["bf16_optimizer_states"]
        m = tmp_path / f"m{low}.jsonl"
        r = run([dsrun, "--master_port", str(free_port()), "--num_gpus", "2", DSWORKER, "--model", "mlp", "--config", write(tmp_path, f"c{low}.json", cfg),
                 "--epochs", "2", "--metrics", str(m)], dict(clean_env, **TWO), timeout=120)
        assert r.returncode == 0, r.stderr
        assert ("bf16 (gradients bf16, bf16 master weights, bf16 optimizer states)" in r.stderr) == low
        losses = [row["loss"] for row in metrics(m)]
        assert len(losses) == 2 * (1000 // 2 // 8) and sum(losses[-10:]) < 0.9 * sum(losses[:10])
        kib = re.search(r"memory per rank at start: .*optimizer state ([\d.]+) KiB", r.stderr).group(1)
        state_bytes[low] = float(kib) * 1024
    assert abs(state_bytes[False] / state_bytes[True] - 3.0) < 0.02


REAL_WORLD = sorted(os.listdir(os.path.join(os.path.dirname(__file__), "configs")))


@pytest.mark.parametrize("name", REAL_WORLD)
def test_configs_shaped_like_the_ones_people_use_are_accepted(clean_env, name):
    """tests/integration/configs: our own configs in the shapes of the Hugging Face Trainer's and
    Accelerate's, LLaVA's, FastChat's, Megatron-DeepSpeed's and DeepSpeedExamples' (auto values, no
    optimizer, offload, Lamb, 1-bit Adam, YAML). Each resolves for 8 ranks with no error."""
    path = os.path.join(os.path.dirname(__file__), "configs", name)
    r = run([DSWORKER, "--model", "mlp", "--config", path, "--print_config"], dict(clean_env, WORLD_SIZE="8"),
            timeout=60)
    assert r.returncode == 0, r.stderr
    assert "error" not in r.stderr
    c = json.loads(r.stdout)
    assert c["train_batch_size"] == c["train_micro_batch_size_per_gpu"] * c["gradient_accumulation_steps"] * 8
