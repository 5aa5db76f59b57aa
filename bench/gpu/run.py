#!/usr/bin/env python3
"""GPU benchmark (needs an NVIDIA GPU and a CUDA build): dsrun's kernels against PyTorch on the same GPU, in one run.

Run (build/bench/gpu_bench is built where nvcc is: scripts/build.sh), with a python that has a CUDA torch:
    python3 bench/gpu/run.py [--params 124000000] [--steps 20] [--reps 3]

adam: one fused AdamW step over --params fp32 parameters (GPT-2 124M's count by default): ours is
kernels/cuda/adam.cuh (one element per thread through the CPU optimizer's own element body, bit-identical to the
CPU), the peer torch.optim.AdamW(fused=True). An fp32 AdamW step reads parameters, gradients and both moments and
writes parameters and moments: 28 bytes per parameter, so its bound is a device-to-device copy moving the same
bytes, measured by each side (cudaMemcpyAsync; torch's copy_). Each side a fresh process per repetition,
interleaved; reported: the median over repetitions, GB/s, the share of the copy's bandwidth, ours / torch.
"""
import argparse, json, os, statistics, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def run_side(a, side):
    if side == "ours":
        argv = [a.ours, "adam", "--params", str(a.params), "--steps", str(a.steps)]
    else:
        argv = [a.python, os.path.join(HERE, "peer_torch.py"), "adam", "--params", str(a.params), "--steps", str(a.steps)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        return {"side": side, "error": (r.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--params", type=int, default=124_000_000)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--ours", default=os.path.join(REPO, "build", "bench", "gpu_bench"))
    p.add_argument("--python", default=sys.executable, help="a python with a CUDA torch (default: this one)")
    p.add_argument("--json", metavar="PATH")
    a = p.parse_args()
    samples = []
    for rep in range(a.reps):
        for side in ("ours", "torch"):
            s = run_side(a, side)
            samples.append(s)
            print(f"rep {rep + 1} {side:5} " + (f"AdamW {s['adam_ms']:.3f} ms, copy {s['copy_ms']:.3f} ms"
                                                if "error" not in s else f"failed: {s['error']}"), file=sys.stderr, flush=True)
    ok = [s for s in samples if "error" not in s]
    device = ok[0]["device"] if ok else "?"
    print(f"AdamW on {a.params:,} fp32 parameters ({device}), mean of {a.steps} steps per run, median of {a.reps} runs;"
          " 28 bytes per parameter")
    med = {}
    for side in ("ours", "torch"):
        runs = [s for s in ok if s["side"] == side]
        if not runs:
            print(f"  {side:5} failed: " + next(s["error"] for s in samples if s["side"] == side))
            continue
        adam_ms = statistics.median(s["adam_ms"] for s in runs)
        copy_ms = statistics.median(s["copy_ms"] for s in runs)
        med[side] = adam_ms
        moved = 28.0 * a.params
        print(f"  {side:5} AdamW {adam_ms:7.3f} ms  {moved / adam_ms / 1e6:6.0f} GB/s   copy {moved / copy_ms / 1e6:6.0f} GB/s"
              f"   AdamW / copy bandwidth {copy_ms / adam_ms:4.0%}")
    if len(med) == 2:
        print(f"  ours / torch (AdamW step rate): {med['torch'] / med['ours']:.2f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(samples, f, indent=1)


if __name__ == "__main__":
    main()
