#!/usr/bin/python3
"""Optimizer benchmark: AdamW steps per second on 50M fp32 parameters, dsworker's optimizer against PyTorch's AdamW
(the for-loop, foreach and fused implementations) and DeepSpeed's DeepSpeedCPUAdam, at 1 and 2 threads, in one run.
With --mixed bf16|fp16, the mixed-precision step around the update instead (an fp32 master and 16-bit
parameters): ours fused in one pass from 16-bit gradients (and "ours-unfused", the separate passes the engine runs
for optimizers that do not fuse), each peer as DeepSpeed's ZeRO-Offload runs it: fp32 gradients unscaled in
place, the step, the master copied into the 16-bit parameters.

Setup once (PyPI's torch and DeepSpeed in <repo>/.venv-bench-torch): bench/zero/setup.sh
Run (build/bench/optim_bench must be built: scripts/build.sh):
    bench/optim/run.py [--params 50000000] [--steps 20] [--reps 3] [--threads 1,2]

Sides, each a fresh process per run, interleaved over --reps repetitions:
  ours        build/bench/optim_bench (runtime/optim's AdamW, OMP_NUM_THREADS=T); it also measures the bound: the
              best of 5 passes of a trivial kernel with AdamW's traffic (p -= g, m += g, v += g in place)
  ours-unfused  (--mixed only) optim_bench --unfused
  default     torch.optim.AdamW(foreach=False)      foreach   torch.optim.AdamW(foreach=True)
  fused       torch.optim.AdamW(fused=True)         deepspeed deepspeed.ops.adam.DeepSpeedCPUAdam(adamw_mode=True)
              (torch.set_num_threads(T) and OMP_NUM_THREADS=T for each)
All: lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay 0.01, 2 untimed steps, then --steps timed ones; per run the
median step time. Reported: the median over runs in Gparam/s, ours / the fastest peer, and the bytes-moved bound:
an fp32 AdamW step reads parameters, gradients and both moments and writes parameters and moments, 28 bytes per
parameter, no faster than the trivial kernel that moves the same bytes. The fused mixed step moves 28 bytes too
(reads 16-bit gradients and fp32 p, m, v; writes p, m, v and the 16-bit parameters); the peers' mixed step 42.
"""
import argparse, json, os, statistics, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SIDES = ("ours", "default", "foreach", "fused", "deepspeed")
MIXED_SIDES = ("ours", "ours-unfused", "fused", "deepspeed")


def run_side(a, side, threads):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "OPENBLAS_", "MKL_"))}
    env.update(OMP_NUM_THREADS=str(threads), DS_ACCELERATOR="cpu")
    mixed = ["--mixed", a.mixed] if a.mixed else []
    if side in ("ours", "ours-unfused"):
        argv = [a.ours, "--params", str(a.params), "--steps", str(a.steps)] + mixed
        if side == "ours-unfused":
            argv.append("--unfused")
    else:
        argv = [os.path.join(a.venv, "bin", "python"), os.path.join(HERE, "peer_adam.py"), "--impl", side,
                "--params", str(a.params), "--steps", str(a.steps), "--threads", str(threads)] + mixed
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        return {"side": side, "threads": threads, "error": (r.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--params", type=int, default=50_000_000)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--mixed", choices=("bf16", "fp16"), help="the mixed-precision step (sides: %s)" % ",".join(MIXED_SIDES))
    p.add_argument("--sides", help="default: %s" % ",".join(SIDES))
    p.add_argument("--ours", default=os.path.join(REPO, "build", "bench", "optim_bench"))
    p.add_argument("--venv", default=os.path.join(REPO, ".venv-bench-torch"))
    p.add_argument("--json", metavar="PATH")
    a = p.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    sides = [s for s in (a.sides or ",".join(MIXED_SIDES if a.mixed else SIDES)).split(",") if s]
    samples = []
    for rep in range(a.reps):
        for t in threads:
            for side in sides:
                s = run_side(a, side, t)
                samples.append(s)
                print(f"rep {rep + 1} threads {t} {side:12} "
                      + (f"{s['gparams_per_s']:.3f} Gparam/s" if "error" not in s else f"failed: {s['error']}"),
                      file=sys.stderr, flush=True)
    what = (f"the {a.mixed} mixed-precision AdamW step (fp32 master)" if a.mixed else "AdamW on fp32 parameters")
    print(f"{what}, {a.params:,} parameters, {a.steps} timed steps per run, median of {a.reps} runs")
    for t in threads:
        med = {}
        for side in sides:
            ok = [s["gparams_per_s"] for s in samples if s["side"] == side and s["threads"] == t and "error" not in s]
            if ok:
                med[side] = statistics.median(ok)
        bound = statistics.median([s["bound_gparams_per_s"] for s in samples if s["side"] == "ours"
                                   and s["threads"] == t and "bound_gparams_per_s" in s] or [float("nan")])
        print(f"threads {t}: bytes-moved bound {bound:.2f} Gparam/s ({bound * 28:.1f} GB/s at 28 bytes per parameter)")
        for side in sides:
            if side in med:
                print(f"  {side:12} {med[side]:7.3f} Gparam/s  {med[side] / bound:5.0%} of the bound")
            else:
                print(f"  {side:12} failed: " + next(s["error"] for s in samples if s["side"] == side and s["threads"] == t))
        peers = {k: v for k, v in med.items() if not k.startswith("ours")}
        if "ours" in med and peers:
            best = max(peers, key=peers.get)
            print(f"  ours / fastest peer ({best}): {med['ours'] / peers[best]:.2f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(samples, f, indent=1)


if __name__ == "__main__":
    main()
