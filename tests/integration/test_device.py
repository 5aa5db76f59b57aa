"""dsworker's GPU training path without a GPU: dsworker_emu is dsworker with the CUDA backend on the
SIMT emulator (device memory = host memory). With DS_ACCELERATOR=cuda, dsrun's two ranks run the gpt
plugin's layers on that "device" (engine/device_layers.h) and must train as the CPU does; 16-bit
precision stays on the CPU and says why."""
import json, os

from conftest import ROOT, run

DSWORKER = os.environ.get("DSWORKER_BIN", os.path.join(ROOT, "build", "worker", "dsworker"))
DSWORKER_EMU = os.environ.get("DSWORKER_EMU_BIN", os.path.join(ROOT, "build", "worker", "dsworker_emu"))

CONFIG = {
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 2,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.002, "weight_decay": 0.1}},
    "gradient_clipping": 1.0,
    "zero_optimization": {"stage": 2},
    "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "seq_len": 32, "vocab_size": 256},
    "data": {"path": "/usr/share/common-licenses/GPL-3"},
}


def losses(path):
    with open(path) as f:
        return [d["loss"] for d in map(json.loads, f) if "loss" in d]  # training steps (not validation)


def train(dsrun, env, tmp_path, name, worker, accelerator, cfg=CONFIG, steps=4):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(cfg))
    metrics = tmp_path / f"{name}.jsonl"
    r = run([dsrun, "--num_gpus", "2", worker, "--model", "gpt", "--config", str(path), "--steps", str(steps),
             "--metrics", str(metrics)], dict(env, DSRUN_LOCAL_SLOTS="2", DS_ACCELERATOR=accelerator), timeout=300)
    assert r.returncode == 0, r.stderr
    return r, losses(metrics)


def test_two_ranks_train_gpt_on_the_emulated_cuda_device_as_on_the_cpu(dsrun, clean_env, tmp_path):
    r, on_device = train(dsrun, clean_env, tmp_path, "device", DSWORKER_EMU, "cuda")
    assert "dsworker: device: the layers run on cuda:0, emulated CUDA device (the CPU SIMT emulator)" in r.stderr
    _, on_cpu = train(dsrun, clean_env, tmp_path, "cpu", DSWORKER, "cpu")
    assert len(on_device) == len(on_cpu) == 4
    for a, b in zip(on_device, on_cpu):
        assert abs(a - b) <= 1e-5 * abs(b), (on_device, on_cpu)
    assert on_device[-1] < on_device[0]


def test_bf16_with_cuda_trains_on_the_cpu_and_says_why(dsrun, clean_env, tmp_path):
    cfg = dict(CONFIG, bf16={"enabled": True})
    r, values = train(dsrun, clean_env, tmp_path, "bf16", DSWORKER_EMU, "cuda", cfg, steps=2)
    assert "DS_ACCELERATOR=cuda, but bf16 training runs on the CPU: the CUDA backend's ops are fp32 so far" in r.stderr
    assert len(values) == 2
