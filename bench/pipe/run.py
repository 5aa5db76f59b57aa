#!/usr/bin/python3
"""Pipeline-parallel GPT training on CPU ranks: dsworker's pipeline stages against DeepSpeed's PipelineEngine, in one
run, on the same model, layout, batch and schedule (1F1B), and the pipeline bubble against (P - 1) / (M + P - 1).

Setup once: bench/gpt_cpu/setup.sh (PyPI's torch into <repo>/.venv-bench-torch), then DeepSpeed into it:
    .venv-bench-torch/bin/pip install deepspeed
Run (build/cli/dsrun, build/worker/dsworker and the gpt plugin built):
    bench/pipe/run.py [--stages 2] [--micro 4] [--gas 8] [--steps 10] [--reps 3] [--json out.json]

Both sides start under dsrun on this machine, one rank per stage (data-parallel size 1), OMP_NUM_THREADS=1 per rank,
DS_ACCELERATOR=cpu, with one generated ds_config: train_micro_batch_size_per_gpu --micro, gradient_accumulation_steps
--gas (the micro-batches of a step), AdamW (lr 1e-3, weight_decay 0.1), gradient_clipping 1.0, ZeRO stage 0, fp32,
"pipeline": {"stages": --stages}, and the `gpt` plugin's model block (--layers 4, --embd 128, --heads 4, --seq 128,
vocab 256: bytes of --data).
  ours       dsrun --num_gpus P dsworker --model gpt --config CFG --steps N --metrics m.jsonl, partition "uniform" (embed and
             the first half of the blocks on stage 0; the rest and the head on stage 1). Step seconds = samples per
             step / the JSONL's samples_per_sec (dsworker's clock around the whole step). Its stdout gives each
             stage's idle share of the 1F1B schedule.
  deepspeed  bench/pipe/peer_pipe.py under <venv>/bin/python through the same dsrun: the plugin's PyTorch twin as a
             PipelineModule (embed, blocks, ln_f, tied head), partition "type:Block" (DeepSpeed matches class names;
             this gives the same split as ours), engine.train_batch() timed.
Per run: the median step time of the steps after --warmup; over --reps runs: the median and min-max of those; the
ratio ours/deepspeed of step times (below 1: ours is faster).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def config(a, partition):
    return {
        "train_micro_batch_size_per_gpu": a.micro,
        "gradient_accumulation_steps": a.gas,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.1}},
        "gradient_clipping": 1.0,
        "steps_per_print": 1000,
        "zero_optimization": {"stage": 0},
        "pipeline": {"stages": a.stages, "partition": partition},
        "model": {"n_layer": a.layers, "n_head": a.heads, "n_embd": a.embd, "seq_len": a.seq, "vocab_size": 256},
        "data": {"path": a.data},
    }


def run_side(a, side, tmp, rep):
    cfg_path = os.path.join(tmp, f"{side}.json")
    metrics = os.path.join(tmp, f"{side}-{rep}.jsonl")
    cfg = config(a, "uniform" if side == "ours" else "type:Block")
    if side == "ours":
        cfg["data"]["val_fraction"] = 0
        program = [a.dsworker, "--model", "gpt", "--config", cfg_path, "--steps", str(a.steps), "--metrics", metrics]
    else:
        program = [os.path.join(a.venv, "bin", "python"), os.path.join(HERE, "peer_pipe.py"), "--config", cfg_path,
                   "--steps", str(a.steps), "--metrics", metrics]
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    env = dict(os.environ, DSRUN_LOCAL_SLOTS=str(a.stages), DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1")
    r = subprocess.run([a.dsrun, "--num_gpus", str(a.stages)] + program, env=env, capture_output=True, text=True,
                       timeout=1800)
    if r.returncode != 0:
        sys.exit(f"{side} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    rows = [json.loads(line) for line in open(metrics)]
    if side == "ours":
        samples = a.micro * a.gas
        seconds = [samples / d["samples_per_sec"] for d in rows if "samples_per_sec" in d]
    else:
        seconds = [d["seconds"] for d in rows]
    idle = [line.split("] ", 1)[-1] for line in r.stdout.splitlines() if "pipeline: " in line]
    return statistics.median(seconds[a.warmup:]), rows[-1]["loss"], idle


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stages", type=int, default=2)
    p.add_argument("--micro", type=int, default=4)
    p.add_argument("--gas", type=int, default=8)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--embd", type=int, default=128)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--data", default="/usr/share/common-licenses")
    p.add_argument("--dsrun", default=os.path.join(REPO, "build", "cli", "dsrun"))
    p.add_argument("--dsworker", default=os.path.join(REPO, "build", "worker", "dsworker"))
    p.add_argument("--venv", default=os.path.join(REPO, ".venv-bench-torch"))
    p.add_argument("--json")
    a = p.parse_args()
    results = {"ours": [], "deepspeed": []}
    idle = []
    with tempfile.TemporaryDirectory(prefix="dsrun-bench-pipe-") as tmp:
        for rep in range(a.reps):
            for side in results:  # interleaved, so that drifts in the machine's speed hit both sides
                seconds, loss, lines = run_side(a, side, tmp, rep)
                results[side].append(seconds)
                if side == "ours":
                    idle = lines
                print(f"rep {rep + 1}/{a.reps} {side:9s} step {seconds * 1e3:8.1f} ms  final loss {loss:.4f}", flush=True)
    tokens = a.micro * a.gas * a.seq
    print(f"\nGPT {a.layers}x{a.embd}, context {a.seq}: {a.stages} stages x 1 rank, {a.gas} micro-batches of {a.micro} "
          f"({tokens} tokens per step), 1 thread per rank")
    for side, values in results.items():
        m = statistics.median(values)
        print(f"  {side:9s} step {m * 1e3:8.1f} ms (min {min(values) * 1e3:.1f}, max {max(values) * 1e3:.1f})"
              f"  {tokens / m:9.0f} tokens/s")
    ratio = statistics.median(results["ours"]) / statistics.median(results["deepspeed"])
    print(f"  ours / deepspeed step time: {ratio:.2f}x")
    for line in idle:
        print(f"  ours: {line}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "seconds": results, "ratio": ratio, "ours_idle": idle}, f, indent=2)


if __name__ == "__main__":
    main()
