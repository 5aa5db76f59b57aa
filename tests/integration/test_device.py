"""dsworker's GPU training path without a GPU: dsworker_emu is dsworker with the CUDA backend on the
SIMT emulator (device memory = host memory). With DS_ACCELERATOR=cuda, dsrun's two ranks run the gpt
plugin's layers on that "device" (engine/device_layers.h) and must train as the CPU does in fp32, at
ZeRO 1 (the device sums the micro-batches' gradients, the tied embedding's included) and 2; in fp16
and bf16 with its matmuls multiplying in 16 bits.

On a machine with a GPU, DSWORKER_GPU_BIN=build/worker/dsworker runs the same checks on the real GPU
(both ranks share cuda:0 when there is one GPU); scripts/gpu-check.sh does that."""
import json, os

import pytest

from conftest import ROOT, run
from throwaway_sshd import free_port

DSWORKER = os.environ.get("DSWORKER_BIN", os.path.join(ROOT, "build", "worker", "dsworker"))
EMULATED = "DSWORKER_GPU_BIN" not in os.environ
DSWORKER_EMU = os.environ.get("DSWORKER_GPU_BIN") or os.environ.get(
    "DSWORKER_EMU_BIN", os.path.join(ROOT, "build", "worker", "dsworker_emu"))

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


def train(dsrun, env, tmp_path, name, worker, accelerator, cfg=CONFIG, steps=4, attention=None, gpus=2):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(cfg))
    metrics = tmp_path / f"{name}.jsonl"
    env = dict(env, DSRUN_LOCAL_SLOTS=str(gpus), DS_ACCELERATOR=accelerator)
    if attention:
        env["DS_CUDA_ATTENTION"] = attention
    r = run([dsrun, "--master_port", str(free_port()), "--num_gpus", str(gpus), worker, "--model", "gpt", "--config", str(path), "--steps", str(steps),
             "--metrics", str(metrics)], env, timeout=300)
    assert r.returncode == 0, r.stderr
    return r, losses(metrics)


# Every stage on a real GPU (seconds there); stages 1 and 2 on the emulator, which is slow.
@pytest.mark.parametrize("stage", [1, 2] if EMULATED else [0, 1, 2, 3])
def test_two_ranks_train_gpt_on_the_emulated_cuda_device_as_on_the_cpu(dsrun, clean_env, tmp_path, stage):
    cfg = dict(CONFIG, zero_optimization={"stage": stage})
    r, on_device = train(dsrun, clean_env, tmp_path, "device", DSWORKER_EMU, "cuda", cfg)
    assert "dsworker: device: the layers run on cuda:0, " in r.stderr
    assert ("emulated CUDA device (the CPU SIMT emulator)" in r.stderr) == EMULATED
    if EMULATED:  # the real NCCL cannot use the emulator's memory: the optimizer stays on the CPU
        assert "the optimizer steps on the CPU" in r.stderr and "with several ranks" in r.stderr
    else:  # NCCL in GPU memory where each rank has a GPU of its own
        assert "the optimizer steps on the device" in r.stderr or "one GPU per rank" in r.stderr
    _, on_cpu = train(dsrun, clean_env, tmp_path, "cpu", DSWORKER, "cpu", cfg)
    assert len(on_device) == len(on_cpu) == 4
    for a, b in zip(on_device, on_cpu):
        assert abs(a - b) <= 1e-5 * abs(b), (on_device, on_cpu)
    assert on_device[-1] < on_device[0]


# One rank: the optimizer steps on the device (engine/device_step.h), unless offload_optimizer keeps it on
# the CPU; both train as the CPU does. At stage 3 the device keeps the parameters' partition and gathers each
# layer there (engine/device_gather.h). In bf16 at ZeRO 2-3 the gradients accumulate in bf16 (DeepSpeed's
# default there), rounded on the device; the device's and the CPU's matmuls both multiply bf16 operands (attention's
# products too on the device only), summed in other orders: within bf16's unit roundoff.
@pytest.mark.parametrize("stage", [2, 3])
@pytest.mark.parametrize("offload,precision", [(False, "fp32"), (True, "fp32"), (False, "bf16")])
def test_one_rank_steps_the_optimizer_on_the_device_unless_offloaded(dsrun, clean_env, tmp_path, offload, precision,
                                                                      stage):
    cfg = dict(CONFIG, zero_optimization={"stage": stage, **({"offload_optimizer": {"device": "cpu"}} if offload else {})})
    if precision == "bf16":
        cfg["bf16"] = {"enabled": True}
    r, on_device = train(dsrun, clean_env, tmp_path, "device", DSWORKER_EMU, "cuda", cfg, gpus=1)
    if offload:
        assert "dsworker: device: the optimizer steps on the CPU" in r.stderr
        assert "grads 0 B" not in r.stdout  # the host sums the gradients
    else:
        assert "dsworker: device: the optimizer steps on the device" in r.stderr
        assert ("gathered there layer by layer" in r.stderr) == (stage == 3)
        assert "grads 0 B," in r.stdout  # the device keeps them: no host gradient buffer
    # the device's own line: its optimizer state is there only when the optimizer steps there
    device_line = next(l for l in r.stdout.splitlines() if "device memory per rank at peak: " in l)
    assert ("optimizer state 0 B" in device_line) == offload, device_line
    # the host never holds Adam's state when the device steps (the device zeroes a fresh one); the summary gives each
    # kind at its peak, so bf16's fp32 master counts as it was before the first update freed it (engine_tests check
    # that the host's master and state are freed while the device holds them)
    host_line = next(l for l in r.stdout.splitlines() if "] memory per rank at peak: " in l)
    assert ("optimizer state 0 B" in host_line) == (not offload and precision == "fp32"), host_line
    cpu_run, on_cpu = train(dsrun, clean_env, tmp_path, "cpu", DSWORKER, "cpu", cfg, gpus=1)
    assert "device memory per rank" not in cpu_run.stdout
    assert len(on_device) == len(on_cpu) == 4
    tolerance = 1e-5 if precision == "fp32" else 2.0 ** -8
    for a, b in zip(on_device, on_cpu):
        assert abs(a - b) <= tolerance * abs(b), (on_device, on_cpu)


# The other optimizers the device steps (every tensor in one launch: SGD's, Lion's, Adagrad's and RMSprop's one, LAMB's three around
# the host's trust ratios) train as the CPU does; on a GPU (scripts/gpu-check.sh) this runs their multi-tensor
# kernels through dsworker.
@pytest.mark.parametrize("optimizer", [
    {"type": "Lamb", "params": {"lr": 0.002, "weight_decay": 0.01}},
    {"type": "SGD", "params": {"lr": 0.05, "momentum": 0.9, "nesterov": True}},
    {"type": "Lion", "params": {"lr": 0.0005, "betas": [0.9, 0.99], "weight_decay": 0.1}},
    {"type": "Adagrad", "params": {"lr": 0.02, "lr_decay": 0.1, "weight_decay": 0.01,
                                   "initial_accumulator_value": 0.1}},
    {"type": "RMSprop", "params": {"lr": 0.001, "alpha": 0.9, "weight_decay": 0.01}},
], ids=["lamb", "sgd", "lion", "adagrad", "rmsprop"])
def test_other_optimizers_step_on_the_device_as_on_the_cpu(dsrun, clean_env, tmp_path, optimizer):
    cfg = dict(CONFIG, optimizer=optimizer)
    r, on_device = train(dsrun, clean_env, tmp_path, "device", DSWORKER_EMU, "cuda", cfg, gpus=1)
    assert "dsworker: device: the optimizer steps on the device" in r.stderr
    _, on_cpu = train(dsrun, clean_env, tmp_path, "cpu", DSWORKER, "cpu", cfg, gpus=1)
    assert len(on_device) == len(on_cpu) == 4
    for a, b in zip(on_device, on_cpu):
        assert abs(a - b) <= 1e-5 * abs(b), (on_device, on_cpu)
    assert on_device[-1] < on_device[0]


# offload_param at stage 3 keeps the parameters' partition in host memory, gathered there: the whole step
# stays on the CPU (as ZeRO-Offload), and the engine names the setting.
def test_offload_param_keeps_stage_3_on_the_host(dsrun, clean_env, tmp_path):
    cfg = dict(CONFIG, zero_optimization={"stage": 3, "offload_param": {"device": "cpu"}})
    r, on_device = train(dsrun, clean_env, tmp_path, "device", DSWORKER_EMU, "cuda", cfg, gpus=1)
    assert "dsworker: device: the optimizer steps on the CPU" in r.stderr
    assert "zero_optimization.offload_param" in r.stderr
    assert len(on_device) == 4 and on_device[-1] < on_device[0]


# With the optimizer on the device the host's master and optimizer state are freed after each update and
# made again for each checkpoint: a run resumed from one is bit-identical to a straight run, final
# checkpoint included.
def test_a_resumed_run_with_the_optimizer_on_the_device_is_bit_identical(dsrun, clean_env, tmp_path):
    def cfg(name):
        return dict(CONFIG, bf16={"enabled": True}, checkpoint={"dir": str(tmp_path / name), "save_interval": 2})
    r, straight = train(dsrun, clean_env, tmp_path, "a", DSWORKER_EMU, "cuda", cfg("a"), steps=6, gpus=1)
    assert "the optimizer steps on the device" in r.stderr
    train(dsrun, clean_env, tmp_path, "b", DSWORKER_EMU, "cuda", cfg("b"), steps=4, gpus=1)
    r, resumed = train(dsrun, clean_env, tmp_path, "b", DSWORKER_EMU, "cuda", cfg("b"), steps=6, gpus=1)
    assert "resumed from" in r.stderr
    assert resumed == straight  # (the metrics file continues)
    name = "global_step6/rank_00000_optim_states.dsckpt"
    assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


@pytest.mark.parametrize("attention", ["fused", "gemm"])
@pytest.mark.parametrize("precision,roundoff", [("fp16", 2.0 ** -11), ("bf16", 2.0 ** -8)])
def test_16_bit_training_on_the_emulated_cuda_device_multiplies_in_16_bits(dsrun, clean_env, tmp_path, precision,
                                                                           roundoff, attention):
    # The device's matmuls multiply 16-bit-rounded inputs (DeepSpeed's fp16 and bf16 models do), the
    # CPU's multiply the same rounded activations in fp32; attention's products, on the device, round P
    # and dS too, through the fused kernel (flash attention, P before normalising) or the GEMMs (after).
    # Each loss within the type's unit roundoff (2^-11 relative in fp16, 2^-8 in bf16) of the CPU's
    # 16-bit run and of the fp32 run, not equal to the CPU's 16-bit run, and no more than 4 times as far
    # from it as that run is from fp32: of the size of 16-bit effects (measured over 3 steps, device to
    # CPU against CPU to fp32: fp16 2.9e-6 fused, 6.3e-6 GEMMs, against 2.7e-5; bf16 2.1e-4 fused,
    # 8.6e-5 GEMMs, against 9.1e-5). A wrong index or tile moves a loss by far more.
    cfg = dict(CONFIG, **{precision: {"enabled": True}})
    r, on_device = train(dsrun, clean_env, tmp_path, f"{precision}-device", DSWORKER_EMU, "cuda", cfg, steps=3,
                         attention=attention)
    assert f"({precision} matmuls with fp32 accumulation, the other ops in fp32)" in r.stderr
    _, on_cpu = train(dsrun, clean_env, tmp_path, f"{precision}-cpu", DSWORKER, "cpu", cfg, steps=3)
    _, fp32 = train(dsrun, clean_env, tmp_path, "fp32", DSWORKER, "cpu", steps=3)
    assert len(on_device) == len(on_cpu) == len(fp32) == 3
    for a, b, c in zip(on_device, on_cpu, fp32):
        assert abs(a - b) <= roundoff * abs(b), (on_device, on_cpu)
        assert abs(a - c) <= roundoff * abs(c), (on_device, fp32)
    to_cpu = max(abs(a - b) for a, b in zip(on_device, on_cpu))
    to_fp32 = max(abs(a - b) for a, b in zip(on_cpu, fp32))
    assert on_device != on_cpu
    assert to_cpu <= 4 * to_fp32, (on_device, on_cpu, fp32)
    print(f"{precision} ({attention}): device to CPU {to_cpu:.3g}, CPU to fp32 {to_fp32:.3g}")


def test_a_bad_attention_kernel_choice_is_an_error_at_start(dsrun, clean_env, tmp_path):
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(CONFIG))
    r = run([dsrun, "--master_port", str(free_port()), "--num_gpus", "1", DSWORKER_EMU, "--model", "gpt", "--config", str(path), "--steps", "1"],
            dict(clean_env, DSRUN_LOCAL_SLOTS="1", DS_ACCELERATOR="cuda", DS_CUDA_ATTENTION="flash"), timeout=120)
    assert r.returncode != 0
    assert "DS_CUDA_ATTENTION='flash': expected fused or gemm (from the environment)" in r.stderr
