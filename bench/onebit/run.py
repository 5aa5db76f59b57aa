#!/usr/bin/python3
"""1-bit optimizers benchmark: bytes sent and time per step of OneBitAdam, ZeroOneAdam and OneBitLamb against
Adam, on the same GPT job at 2 CPU ranks of this machine, in one run.

Run (dsrun, dsworker and the gpt plugin must be built):
    bench/onebit/run.py [--reps 3] [--warmup 5] [--steps 10] [--json results.json]

Every side is `dsrun --num_gpus 2 --master_port <free port> build/worker/dsworker --model gpt --config CFG
--steps W+S --metrics m.jsonl` (DSRUN_LOCAL_SLOTS=2, one kernel thread per rank) with one generated ds_config:
  model   the gpt plugin: n_layer 6, n_head 6, n_embd 384, seq_len 256, vocab 256 (bytes): 10,844,160 parameters,
          fp32 (bench/gpt_cpu's model)
  config  train_micro_batch_size_per_gpu --micro-batch (2), gradient_accumulation_steps 1, stage 0, no clipping,
          data.path --data (/usr/share/common-licenses); optimizer lr 1e-4, betas 0.9/0.999, eps 1e-8, wd 0 and
            Adam         type Adam
            OneBitAdam   freeze_step W
            ZeroOneAdam  var_freeze_step W-2 (local steps from step W), local_step_scaler 4, local_step_clipper 4
                         (a sync every step for 4 steps, then every 2nd for 4, then every 4th; DeepSpeed's defaults,
                         32678 and 16, would sync every step for the whole run)
            OneBitLamb   freeze_step W
  steps   W = --warmup (5) warm-up steps, then S = --steps (10) timed steps: the compressed phase of every 1-bit side.
Measured per run, over the timed steps, from dsworker's per-step JSONL (rank 0): `sent_bytes` (payload this rank
sent in the step: every collective, the loss and norm all-reduces included) and the step time (global batch /
`samples_per_sec`, dsworker's steady-clock time of the whole step). Reported per side: the median over runs of the
run's mean bytes and median step time, and the ratios Adam / side (above 1: the side sends less, or is faster);
also the best (smallest) run median and the ratio of the bests, which a load that comes and goes during the
benchmark (a shared machine) disturbs least. Repetitions are interleaved (every side once per repetition).

DeepSpeed's own 1-bit optimizers are not a peer here: they need cupy with NCCL (or MPI / HCCL / a CUDA-built
packbits extension) and do not run on CPU ranks, so Adam on the same engine is the reference.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from common import REPO, binary_id, log  # noqa: E402
from throwaway_sshd import free_port  # noqa: E402

DSRUN = os.path.join(REPO, "build", "cli", "dsrun")
DSWORKER = os.path.join(REPO, "build", "worker", "dsworker")
SIDES = ["Adam", "OneBitAdam", "ZeroOneAdam", "OneBitLamb"]


def optimizer(side, warmup):
    params = {"lr": 1e-4, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0}
    if side in ("OneBitAdam", "OneBitLamb"):
        params["freeze_step"] = warmup
    if side == "ZeroOneAdam":
        params.update(var_freeze_step=warmup - 2, local_step_scaler=4, local_step_clipper=4)
    return {"type": side, "params": params}


def config(side, args):
    return {"train_micro_batch_size_per_gpu": args.micro_batch, "gradient_accumulation_steps": 1,
            "steps_per_print": 1000, "gradient_clipping": 0.0, "zero_optimization": {"stage": 0},
            "optimizer": optimizer(side, args.warmup),
            "model": {"n_layer": 6, "n_head": 6, "n_embd": 384, "seq_len": 256, "vocab_size": 256},
            "data": {"path": args.data, "val_fraction": 0.0}}


def run_side(side, args, tmp):
    cfg = os.path.join(tmp, f"{side}.json")
    metrics = os.path.join(tmp, f"{side}.jsonl")
    with open(cfg, "w") as f:
        json.dump(config(side, args), f)
    if os.path.exists(metrics):
        os.remove(metrics)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DS_", "DSRUN_", "OMP_", "OPENBLAS_"))}
    env["DSRUN_LOCAL_SLOTS"] = "2"
    cmd = [DSRUN, "--num_gpus", "2", "--master_port", str(free_port()), DSWORKER, "--model", "gpt", "--config", cfg,
           "--steps", str(args.warmup + args.steps), "--metrics", metrics]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    if r.returncode != 0:
        raise SystemExit(f"{side}: dsworker failed ({r.returncode}):\n{r.stderr[-3000:]}")
    steps = [x for x in map(json.loads, open(metrics).read().splitlines()) if "loss" in x][args.warmup:]
    if any(x["averaged_gradients"] for x in steps) and side != "Adam":
        raise SystemExit(f"{side}: a timed step still averaged gradients (warm-up too short)")
    seconds = [x["samples"] / x["step"] / x["samples_per_sec"] for x in steps]  # samples = step x global batch
    return {"bytes": statistics.mean(x["sent_bytes"] for x in steps), "step_s": statistics.median(seconds),
            "last_loss": steps[-1]["loss"], "per_step_bytes": [x["sent_bytes"] for x in steps]}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=5, help="warm-up steps (freeze_step), >= 3")
    p.add_argument("--steps", type=int, default=10, help="timed steps after the warm-up")
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--data", default="/usr/share/common-licenses")
    p.add_argument("--timeout", type=int, default=900)
    p.add_argument("--json", help="write every sample here")
    args = p.parse_args()
    if args.warmup < 3:
        raise SystemExit("--warmup must be >= 3 (ZeroOneAdam's var_freeze_step is warmup - 2)")
    log(f"dsworker {binary_id(DSWORKER)}; {args.reps} reps x {len(SIDES)} sides, {args.warmup} + {args.steps} steps")
    samples = {s: [] for s in SIDES}
    with tempfile.TemporaryDirectory(prefix="bench-onebit-") as tmp:
        for rep in range(args.reps):
            for side in SIDES:
                samples[side].append(run_side(side, args, tmp))
                x = samples[side][-1]
                log(f"rep {rep + 1} {side}: {x['bytes'] / 1024:.1f} KiB/step, {x['step_s'] * 1000:.0f} ms/step")
    adam_bytes = statistics.median(x["bytes"] for x in samples["Adam"])
    adam_times = [x["step_s"] * 1000 for x in samples["Adam"]]
    print(f"{'side':<12} {'sent/step':>12} {'Adam/side':>10} {'step (ms)':>10} {'min-max':>12} {'Adam/side':>10} "
          f"{'best Adam/side':>15}")
    for side in SIDES:
        b = statistics.median(x["bytes"] for x in samples[side])
        times = [x["step_s"] * 1000 for x in samples[side]]
        t = statistics.median(times)
        print(f"{side:<12} {b / 1024:>8.1f} KiB {adam_bytes / b:>9.1f}x {t:>10.0f} {min(times):>5.0f}-{max(times):<6.0f} "
              f"{statistics.median(adam_times) / t:>9.2f}x {min(adam_times) / min(times):>14.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "samples": samples}, f, indent=1)


if __name__ == "__main__":
    main()
