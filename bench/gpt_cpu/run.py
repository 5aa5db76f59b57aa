#!/usr/bin/python3
"""GPT training on the CPU: tokens/s, peak memory and achieved GFLOP/s of dsworker against PyTorch, in one run.

Setup once (PyPI's current torch into <repo>/.venv-bench-torch; Debian's python3-torch; cblas.h):
    bench/gpt_cpu/setup.sh
Run (build/worker/dsworker and build/plugins/libds_model_gpt.so must be built):
    bench/gpt_cpu/run.py [--threads 1,2] [--reps 3] [--sides ours,torch,torch-debian] [--json results.json]

Every side trains the same GPT on one process of this machine, with the same thread count, batch and data:
  model   the `gpt` plugin (models/gpt/gpt.cpp) and its PyTorch twin tests/integration/torch_gpt.py (same math, same
          parameter names): by default n_layer 6, n_head 6, n_embd 384, seq_len 256, vocab_size 256 (bytes), pre-LN
          blocks, tanh GELU, LM head tied to the token embedding; 10,844,160 parameters, fp32.
  config  one generated ds_config for all sides: train_micro_batch_size_per_gpu --batch (8), gradient_accumulation_steps
          1, AdamW (lr 6e-4, betas 0.9/0.95, eps 1e-8, weight_decay 0.1), gradient_clipping 1.0, no scheduler,
          zero_optimization stage 0, data.path --data (/usr/share/common-licenses, val_fraction 0), fp32 (and bf16
          for the -bf16 sides).
  steps   --warmup-steps (3) + --steps (15) per run; only the last --steps count.

Sides (--sides, comma-separated):
  ours          build/worker/dsworker --model gpt --config CFG --steps N --metrics m.jsonl (one rank alone, world size 1),
                OMP_NUM_THREADS=T (dsworker's thread count: its kernels and OpenBLAS's OpenMP build share one pool
                of T threads; dsworker re-executes itself with
                OPENBLAS_CORETYPE set when Debian's OpenBLAS misdetects the CPU). Step seconds = tokens per step /
                the JSONL's tokens_per_sec (dsworker's steady clock around the whole optimizer step).
  ours-bf16     the same with "bf16": {"enabled": true}.
  torch         bench/gpt_cpu/peer_train.py under <venv>/bin/python (PyPI's torch; MKL + oneDNN), fp32,
                torch.set_num_threads(T), OMP_NUM_THREADS=MKL_NUM_THREADS=T; torch.optim.AdamW with torch's default
                implementation for CPU tensors. perf_counter around the same work as dsworker's step.
  torch-bf16    the same with the forward under torch.autocast("cpu", torch.bfloat16).
  torch-fused   the same with torch.optim.AdamW(fused=True) (not a default: what a tuned script would use).
  torch-debian  peer_train.py under /usr/bin/python3 (Debian's python3-torch 1.13 on Debian's pthread OpenBLAS), fp32,
                with OPENBLAS_NUM_THREADS=T (torch.set_num_threads does not reach that OpenBLAS) and the OpenBLAS core
                fix dsworker applies to itself (OPENBLAS_CORETYPE=SkylakeX on an AVX-512 CPU).

Per run: tokens/s = timed steps x tokens per step / their summed seconds (so the total over the timed steps, not a
mean of rates); peak RSS = ru_maxrss of the process (os.wait4), which for dsworker covers its re-executed image, and
for the torch sides also the PyTorch runtime itself: peer_train.py reports its VmRSS right after `import torch`
(PyPI's CUDA-built wheel maps its CUDA libraries even on a CPU-only run) and before the first step.
Over runs: the median of the run figures, with their min-max. Ratios: ours/peer of the medians (tokens/s above 1:
ours is faster; peak RSS below 1: ours uses less).

Achieved GFLOP/s = tokens/s x model FLOP per token, with the usual estimate (Kaplan et al.; PaLM appendix B;
nanoGPT's estimate_mfu) for a training step (forward + backward = 3 x forward, 2 FLOP per multiply-add):
    FLOP/token = 6 N + 12 L T C,   N = 12 L C^2 + V C
N counts the weights of every matmul (per layer c_attn 3C^2, attn c_proj C^2, mlp c_fc 4C^2, mlp c_proj 4C^2; plus
the tied V x C head; not biases, LayerNorms, wpe or the embedding gather); 12 L T C is attention's q.k^T and att.v
counted over the full T x T square (causal masking halves the useful work; convention: not discounted). Defaults:
71.37 MFLOP per token. GEMM peak: per thread count, cblas_sgemm 2048^3 (bench/gpt_cpu/sgemm_peak.cpp, compiled with
g++ into the temporary directory, linked to Debian's OpenBLAS with OPENBLAS_CORETYPE fixed), best of --gemm-reps,
and torch.mm 2048^3 under PyPI's torch (MKL), best of the same; the higher one is the machine's measured peak, and
each side's GFLOP/s is given as a percentage of it. torch.mm in bf16 (oneDNN; AMX where the CPU has it) gives the
bf16 peak, the reference for the -bf16 sides. The probes run before and after the training runs.

The repetitions are interleaved (per repetition: each thread count, each side), so background load hits all alike.
The load average is printed before and after and recorded per run. --json writes every sample. Each run has a time
limit (--timeout); its process group and the temporary directory are removed at the end, also on Ctrl-C/SIGTERM.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
from common import binary_id, log  # noqa: E402  (bench/common.py)

PEER = os.path.join(HERE, "peer_train.py")
SGEMM_SRC = os.path.join(HERE, "sgemm_peak.cpp")
ALL_SIDES = ("ours", "ours-bf16", "torch", "torch-bf16", "torch-fused", "torch-debian")
MIB = 1048576.0

TORCH_MM_PROBE = r"""
import json, sys, time, torch
n, reps, t = (int(a) for a in sys.argv[1:4])
torch.set_num_threads(t)
out = {"n": n, "threads": torch.get_num_threads(), "torch": torch.__version__}
for name, dt in (("", torch.float32), ("bf16_", torch.bfloat16)):
    a = (torch.rand(n, n) - 0.5).to(dt); b = (torch.rand(n, n) - 0.5).to(dt); c = torch.empty(n, n, dtype=dt)
    torch.mm(a, b, out=c)
    g = []
    for _ in range(reps):
        t0 = time.perf_counter(); torch.mm(a, b, out=c); g.append(2 * n ** 3 / (time.perf_counter() - t0) / 1e9)
    g.sort()
    out[name + "best_gflops"] = g[-1]
    out[name + "median_gflops"] = g[len(g) // 2]
print(json.dumps(out))
"""

_CORE_FOR_TIER = {3: "SkylakeX", 2: "Haswell", 1: "SandyBridge"}


def cpu_core_name():
    """The OpenBLAS core this CPU supports (what dsworker's re-exec picks), or None."""
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    if {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"} <= flags:
        return _CORE_FOR_TIER[3]
    if {"avx2", "fma"} <= flags:
        return _CORE_FOR_TIER[2]
    if "avx" in flags:
        return _CORE_FOR_TIER[1]
    return None


def loadavg():
    with open("/proc/loadavg") as f:
        return f.read().split()[:3]


def flops_per_token(L, C, T, V):
    n_mm = 12 * L * C * C + V * C
    return 6 * n_mm + 12 * L * T * C, n_mm


def median(xs):
    return statistics.median(xs) if xs else float("nan")


SIZE_RE = r"([\d.]+) (B|KiB|MiB|GiB)"
UNIT_MIB = {"B": 1 / MIB, "KiB": 1 / 1024.0, "MiB": 1.0, "GiB": 1024.0}
PEAK_RE = re.compile(rf"memory per rank at peak: (.*); peak RSS {SIZE_RE}")
PARAMS_RE = re.compile(r"dsworker: model \S+: (\d+) parameters")


class Bench:
    def __init__(self, args, root):
        self.args = args
        self.root = root
        self.samples = []
        self.probes = []
        self.counter = 0
        self.current = None  # the running child (Popen), for cleanup

    # ----- configuration and environment

    def config(self, bf16=False):
        a = self.args
        cfg = {
            "train_micro_batch_size_per_gpu": a.batch,
            "gradient_accumulation_steps": 1,
            "steps_per_print": 1000000,
            "optimizer": {"type": "AdamW", "params": {"lr": 6e-4, "betas": [0.9, 0.95], "eps": 1e-8,
                                                      "weight_decay": 0.1}},
            "gradient_clipping": 1.0,
            "zero_optimization": {"stage": 0},
            "model": {"n_layer": a.n_layer, "n_head": a.n_head, "n_embd": a.n_embd, "seq_len": a.seq_len,
                      "vocab_size": 256},
            "data": {"path": a.data, "val_fraction": 0.0},
        }
        if bf16:
            cfg["bf16"] = {"enabled": True}
        return cfg

    def base_env(self):
        drop = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OPENBLAS_CORETYPE",
                "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE", "MASTER_ADDR",
                "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "KMP_AFFINITY", "OMP_PROC_BIND")
        return {k: v for k, v in os.environ.items() if k not in drop and not k.startswith(("DS_", "DSRUN_"))}

    def env_for(self, side, threads):
        env = self.base_env()
        env["OMP_NUM_THREADS"] = str(threads)
        if side.startswith("torch"):
            env["MKL_NUM_THREADS"] = str(threads)
            env["CUDA_VISIBLE_DEVICES"] = ""
        if side.startswith("torch-debian"):
            env["OPENBLAS_NUM_THREADS"] = str(threads)
            if self.args.core:
                env["OPENBLAS_CORETYPE"] = self.args.core
        return env

    def argv(self, side, cfg_path, metrics, steps, threads):
        a = self.args
        if side.startswith("ours"):
            return [a.dsworker, "--model", "gpt", "--config", cfg_path, "--steps", str(steps), "--metrics", metrics]
        py = a.python if side.startswith("torch-debian") else os.path.join(a.venv, "bin", "python")
        argv = [py, PEER, "--config", cfg_path, "--steps", str(steps), "--threads", str(threads), "--metrics", metrics]
        if side.endswith("-bf16"):
            argv.append("--bf16")
        if side == "torch-fused":
            argv += ["--adamw", "fused"]
        return argv

    # ----- processes

    def launch(self, argv, env, cwd, limit, logpath):
        """Runs argv in its own session; returns (exit code or None on timeout, output, wall s, ru_maxrss KiB)."""
        timed_out = threading.Event()
        with open(logpath, "wb") as logf:
            t0 = time.monotonic()
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, env=env,
                                    cwd=cwd, start_new_session=True)
            self.current = proc

            def on_timeout():
                timed_out.set()
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    pass

            timer = threading.Timer(limit, on_timeout)
            timer.start()
            try:
                _, status, ru = os.wait4(proc.pid, 0)
            finally:
                timer.cancel()
            proc.returncode = os.waitstatus_to_exitcode(status)
            wall = time.monotonic() - t0
            try:  # whatever the child left in its session
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.current = None
        with open(logpath, "rb") as f:
            text = f.read().decode(errors="replace")
        return (None if timed_out.is_set() else proc.returncode), text, wall, ru.ru_maxrss

    # ----- GEMM peak

    def build_sgemm(self):
        exe = os.path.join(self.root, "sgemm_peak")
        cmd = ["g++", "-O2", "-o", exe, SGEMM_SRC, "-lopenblas"]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            raise SystemExit(f"bench/gpt_cpu: cannot build the sgemm probe ({' '.join(cmd)}):\n{r.stdout}"
                             "\n(bench/gpt_cpu/setup.sh installs libopenblas-dev and g++)")
        self.sgemm = exe

    def probe(self, threads, when):
        a = self.args
        out = {"threads": threads, "when": when, "loadavg": loadavg()}
        env = self.base_env()
        if a.core:
            env["OPENBLAS_CORETYPE"] = a.core
        env["OPENBLAS_NUM_THREADS"] = str(threads)
        tries = [("openblas", [self.sgemm, str(a.gemm_n), str(a.gemm_reps), str(threads)], env)]
        venv_py = os.path.join(a.venv, "bin", "python")
        if any(s.startswith("torch") and not s.startswith("torch-debian") for s in a.sides) and os.access(venv_py,
                                                                                                          os.X_OK):
            tenv = self.base_env()
            tenv.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), CUDA_VISIBLE_DEVICES="")
            tries.append(("torch_mm", [venv_py, "-c", TORCH_MM_PROBE, str(a.gemm_n), str(a.gemm_reps), str(threads)],
                          tenv))
        for name, argv, e in tries:
            logpath = os.path.join(self.root, f"probe-{name}-{threads}-{when}.log")
            rc, text, _, _ = self.launch(argv, e, self.root, 300, logpath)
            line = next((l for l in reversed(text.splitlines()) if l.startswith("{")), None)
            if rc == 0 and line:
                out[name] = json.loads(line)
            else:
                out[name] = {"error": f"exit {rc}: {text.strip()[-300:]}"}
        self.probes.append(out)
        got = ", ".join(f"{k} {v['best_gflops']:.0f} GFLOP/s" if "best_gflops" in v else f"{k} FAILED {v['error']}"
                        for k, v in out.items() if isinstance(v, dict))
        if "bf16_best_gflops" in out.get("torch_mm", {}):
            got += f" (bf16 {out['torch_mm']['bf16_best_gflops']:.0f})"
        log(f"  GEMM peak probe ({when}), {threads} thread(s), {a.gemm_n}^3 best of {a.gemm_reps}: {got}")

    def peak(self, threads):
        vals = {}
        for p in self.probes:
            if p["threads"] != threads:
                continue
            for k in ("openblas", "torch_mm"):
                if "best_gflops" in p.get(k, {}):
                    vals[k] = max(vals.get(k, 0.0), p[k]["best_gflops"])
        return vals

    def bf16_peak(self, threads):
        vals = [p["torch_mm"]["bf16_best_gflops"] for p in self.probes
                if p["threads"] == threads and "bf16_best_gflops" in p.get("torch_mm", {})]
        return max(vals) if vals else float("nan")

    # ----- one run

    def run_once(self, side, threads, rep):
        a = self.args
        self.counter += 1
        rundir = os.path.join(self.root, "runs", f"{self.counter:04d}-t{threads}-{side}")
        os.makedirs(rundir)
        cfg_path = os.path.join(rundir, "ds_config.json")
        with open(cfg_path, "w") as f:
            json.dump(self.config(bf16=side.endswith("-bf16")), f, indent=1)
        metrics = os.path.join(rundir, "m.jsonl")
        steps = a.warmup_steps + a.steps
        argv = self.argv(side, cfg_path, metrics, steps, threads)
        env = self.env_for(side, threads)
        sample = {"side": side, "threads": threads, "rep": rep, "ok": False, "errors": [], "argv": argv,
                  "env": {k: env[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                              "OPENBLAS_CORETYPE") if k in env},
                  "loadavg_before": loadavg()}
        rc, text, wall, maxrss = self.launch(argv, env, rundir, a.timeout, os.path.join(rundir, "output.log"))
        sample.update(rc=rc, wall_s=wall, maxrss_mib=maxrss / 1024.0, loadavg_after=loadavg())
        if rc is None:
            sample["errors"].append(f"still running after {a.timeout} s: killed")
        elif rc != 0:
            sample["errors"].append(f"exit code {rc}")
        else:
            self.parse(sample, text, metrics, steps)
        if not sample["ok"]:
            sample["log_tail"] = "\n".join(text.splitlines()[-25:])
        self.samples.append(sample)
        self.report(sample)

    def parse(self, sample, text, metrics, steps):
        a = self.args
        tokens_per_step = a.batch * a.seq_len
        try:
            with open(metrics) as f:
                rows = [json.loads(l) for l in f if l.strip()]
        except (OSError, ValueError) as e:
            sample["errors"].append(f"metrics {metrics}: {e}")
            return
        rows = [r for r in rows if "loss" in r]  # dsworker may add validation lines
        if len(rows) != steps:
            sample["errors"].append(f"metrics has {len(rows)} steps, expected {steps}")
            return
        if sample["side"].startswith("ours"):
            secs = [tokens_per_step / r["tokens_per_sec"] for r in rows]
        else:
            secs = [r["seconds"] for r in rows]
        timed = secs[a.warmup_steps:]
        sample["step_s_all"] = secs
        sample["tokens_per_sec"] = len(timed) * tokens_per_step / sum(timed)
        sample["tokens_per_sec_median_step"] = tokens_per_step / median(timed)
        sample["loss_first_last"] = [rows[0]["loss"], rows[-1]["loss"]]
        sample["loss_all"] = [r["loss"] for r in rows]
        for line in text.splitlines():
            m = PEAK_RE.search(line)
            if m:
                sample["reported_peak_rss_mib"] = float(m.group(2)) * UNIT_MIB[m.group(3)]
                sample["reported_memory"] = m.group(1)
            m = PARAMS_RE.search(line)
            if m:
                sample["num_parameters"] = int(m.group(1))
            if line.startswith("PEER_INFO "):
                info = json.loads(line[len("PEER_INFO "):])
                sample["peer_info"] = info
                sample["num_parameters"] = info["num_parameters"]
                sample["rss_after_import_mib"] = info["rss_after_import_kib"] / 1024.0
                sample["rss_before_first_step_mib"] = info["rss_before_first_step_kib"] / 1024.0
            if line.startswith("dsworker: ") and ("blas" in line.lower() or "openblas" in line.lower()):
                sample.setdefault("dsworker_blas_lines", []).append(line)
        sample["ok"] = True

    def report(self, s):
        head = f"  rep {s['rep'] + 1} threads {s['threads']} {s['side']:13}"
        if s["ok"]:
            extra = ""
            if "rss_after_import_mib" in s:
                extra = f" (after import torch {s['rss_after_import_mib']:.0f}, before step 1 " \
                        f"{s['rss_before_first_step_mib']:.0f})"
            log(f"{head} {s['tokens_per_sec']:7.0f} tokens/s (step median {s['tokens_per_sec_median_step']:.0f}), "
                f"peak RSS {s['maxrss_mib']:.0f} MiB{extra}, loss {s['loss_first_last'][0]:.3f} -> "
                f"{s['loss_first_last'][1]:.3f}, run {s['wall_s']:.1f} s, load {s['loadavg_before'][0]} -> "
                f"{s['loadavg_after'][0]}")
        else:
            log(f"{head} FAILED: {' | '.join(s['errors'])}")
            log("    output (tail):\n" + "\n".join("      " + l for l in s.get("log_tail", "").splitlines()))

    def run(self):
        a = self.args
        for t in a.threads:
            self.probe(t, "before")
        for rep in range(a.reps):
            for t in a.threads:
                for side in a.sides:
                    self.run_once(side, t, rep)
        for t in a.threads:
            self.probe(t, "after")


# ---------------------------------------------------------------------------------------------------------------
# Reporting


def side_label(side, info):
    tv = info.get("torch", {}).get(side)
    if side.startswith("ours"):
        return side
    return f"{side} ({tv})" if tv else side


def summary(bench, info):
    a = bench.args
    fpt = info["flops_per_token"]
    out = []
    for t in a.threads:
        pk = bench.peak(t)
        peak = max(pk.values()) if pk else float("nan")
        bf16_peak = bench.bf16_peak(t)
        # A CPU without bf16 units (no AMX, no AVX-512-BF16) multiplies bf16 far slower than fp32 in torch.mm; its
        # -bf16 sides (ours rounds the operands and multiplies them with sgemm there) are then shown against fp32's.
        bf16_units = not bf16_peak < peak  # (unknown without the torch probe: as before)
        lines = [f"{t} thread(s): fp32 GEMM peak {peak:.0f} GFLOP/s (" + ", ".join(
            f"{'OpenBLAS sgemm' if k == 'openblas' else 'torch.mm fp32'} {v:.0f}" for k, v in sorted(pk.items()))
            + f"; {a.gemm_n}^3, best of {a.gemm_reps}, before and after)"
            + (f"; bf16 GEMM peak {bf16_peak:.0f} GFLOP/s (torch.mm bf16)" if bf16_peak == bf16_peak else "")
            + ("; % peak of a -bf16 side is of the bf16 peak" if bf16_units else
               "; bf16 slower than fp32 on this CPU: % peak of a -bf16 side is of the fp32 peak")]
        lines.append(f"  {'side':33} {'tokens/s':>9} {'runs min-max':>13} {'step ms':>8} {'peak RSS MiB':>13} "
                     f"{'min-max':>10} {'GFLOP/s':>8} {'% peak':>7}  loss first -> last")
        med, rss = {}, {}
        for side in a.sides:
            mine = [s for s in bench.samples if s["side"] == side and s["threads"] == t]
            ok = [s for s in mine if s["ok"]]
            label = side_label(side, info)
            if not ok:
                lines.append(f"  {label:33} no successful run ({len(mine)} failed)")
                continue
            tps = [s["tokens_per_sec"] for s in ok]
            rs = [s["maxrss_mib"] for s in ok]
            med[side], rss[side] = median(tps), median(rs)
            gf = med[side] * fpt / 1e9
            ref = bf16_peak if side.endswith("-bf16") and bf16_units else peak
            step_ms = a.batch * a.seq_len / med[side] * 1000
            l0 = median([s["loss_first_last"][0] for s in ok])
            l1 = median([s["loss_first_last"][1] for s in ok])
            lines.append(f"  {label:33} {med[side]:>9.0f} {min(tps):>6.0f}-{max(tps):<6.0f} {step_ms:>8.0f} "
                         f"{rss[side]:>13.0f} {min(rs):>4.0f}-{max(rs):<5.0f} {gf:>8.1f} {100 * gf / ref:>6.1f}%  "
                         f"{l0:.3f} -> {l1:.3f}" + (f"  [{len(ok)}/{len(mine)} runs ok]" if len(ok) != len(mine)
                                                     else ""))
            imp = [s["rss_after_import_mib"] for s in ok if "rss_after_import_mib" in s]
            if imp:
                pre = median([s["rss_before_first_step_mib"] for s in ok])
                lines.append(f"  {'':33} RSS after `import torch` {median(imp):.0f} MiB, before step 1 {pre:.0f} MiB; "
                             f"peak - import {rss[side] - median(imp):.0f} MiB")
        for mine, peers in (("ours", ("torch", "torch-fused", "torch-debian")), ("ours-bf16", ("torch-bf16",))):
            for peer in peers:
                if mine in med and peer in med:
                    lines.append(f"  ratio {mine}/{peer}: tokens/s {med[mine] / med[peer]:.2f}x (above 1: ours faster), "
                                 f"peak RSS {rss[mine] / rss[peer]:.2f}x")
        out.append("\n".join(lines))
    return "\n\n".join(out)



def versions(args):
    def cmd(argv):
        try:
            r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, timeout=120)
            return ((r.stdout or r.stderr).strip().splitlines() or ["?"])[-1]
        except (OSError, subprocess.TimeoutExpired):
            return "?"

    venv_py = os.path.join(args.venv, "bin", "python")
    v = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpus": os.cpu_count(),
        "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?"),
        "kernel": platform.release(),
        "commit": cmd(["git", "-C", REPO, "rev-parse", "--short", "HEAD"]),
        "worktree_changes": cmd(["sh", "-c", f"git -C {shlex.quote(REPO)} status --porcelain --untracked-files=no "
                                             "| wc -l"]),
        "openblas": cmd(["dpkg-query", "-W", "-f=${Version}", "libopenblas0-openmp"]),
        "python3-torch": cmd(["dpkg-query", "-W", "-f=${Version}", "python3-torch"]),
        "dsworker_binary": binary_id(args.dsworker),
        "torch": {},
    }
    for side in args.sides:
        if side.startswith("torch-debian"):
            v["torch"][side] = "torch " + cmd([args.python, "-c", "import torch; print(torch.__version__)"])
        elif side.startswith("torch") and os.access(venv_py, os.X_OK):
            v["torch"][side] = "torch " + cmd([venv_py, "-c", "import torch; print(torch.__version__)"])
    return v


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    p.add_argument("--sides", default="ours,torch,torch-debian", help=f"comma-separated subset of {','.join(ALL_SIDES)}")
    p.add_argument("--reps", type=int, default=3, help="whole runs per side and thread count (default 3)")
    p.add_argument("--warmup-steps", type=int, default=3, help="untimed steps at the start of each run (default 3)")
    p.add_argument("--steps", type=int, default=15, help="timed steps per run (default 15)")
    p.add_argument("--batch", type=int, default=8, help="sequences per step (default 8)")
    p.add_argument("--n-layer", type=int, default=6)
    p.add_argument("--n-head", type=int, default=6)
    p.add_argument("--n-embd", type=int, default=384)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--data", default="/usr/share/common-licenses", help="data.path (default /usr/share/common-licenses)")
    p.add_argument("--gemm-n", type=int, default=2048, help="GEMM peak probe size N (N^3; default 2048)")
    p.add_argument("--gemm-reps", type=int, default=5, help="GEMM peak probe repetitions (default 5)")
    p.add_argument("--core", default="auto", help="OPENBLAS_CORETYPE for Debian's torch and the sgemm probe (auto: "
                   "what dsworker picks for this CPU; off: leave OpenBLAS alone)")
    p.add_argument("--timeout", type=int, default=600, help="time limit of one run, s (default 600)")
    p.add_argument("--dsworker", default=os.path.join(REPO, "build", "worker", "dsworker"))
    p.add_argument("--venv", default=os.path.join(REPO, ".venv-bench-torch"), help="venv with PyPI's torch (setup.sh)")
    p.add_argument("--python", default="/usr/bin/python3", help="python with Debian's torch (torch-debian)")
    p.add_argument("--json", metavar="PATH", help="write every sample and the environment to PATH")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (configs, logs, metrics)")
    args = p.parse_args()
    try:
        args.threads = [int(t) for t in args.threads.split(",") if t]
    except ValueError:
        p.error("--threads takes comma-separated integers")
    if not args.threads or min(args.threads) < 1:
        p.error("--threads takes comma-separated integers >= 1")
    args.sides = [s for s in args.sides.split(",") if s]
    if not args.sides or set(args.sides) - set(ALL_SIDES):
        p.error(f"--sides takes a comma-separated subset of {','.join(ALL_SIDES)}")
    if args.reps < 1 or args.steps < 1 or args.warmup_steps < 0 or args.batch < 1:
        p.error("--reps, --steps, --batch must be >= 1 and --warmup-steps >= 0")
    if args.n_embd % args.n_head:
        p.error("--n-embd must be a multiple of --n-head")
    args.core = cpu_core_name() if args.core == "auto" else (None if args.core == "off" else args.core)
    args.dsworker = os.path.abspath(args.dsworker)
    args.data = os.path.abspath(args.data)
    if any(s.startswith("ours") for s in args.sides) and not os.access(args.dsworker, os.X_OK):
        p.error(f"{args.dsworker} is not an executable: build it first (cmake --build --preset default)")
    if any(s.startswith("torch") and not s.startswith("torch-debian") for s in args.sides) and \
            not os.access(os.path.join(args.venv, "bin", "python"), os.X_OK):
        p.error(f"no venv with PyPI's torch at {args.venv}: run bench/gpt_cpu/setup.sh (or leave out the torch sides)")
    if any(s.startswith("torch-debian") for s in args.sides) and not os.access(args.python, os.X_OK):
        p.error(f"{args.python} is not an executable")

    def on_signal(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)

    root = tempfile.mkdtemp(prefix="dsrun-bench-gpt-cpu-")
    bench = Bench(args, root)
    rc = 0
    try:
        info = versions(args)
        info["loadavg_before"] = loadavg()
        info["command"] = " ".join(shlex.quote(x) for x in [os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:])
        fpt, n_mm = flops_per_token(args.n_layer, args.n_embd, args.seq_len, 256)
        info["flops_per_token"] = fpt
        info["matmul_weights"] = n_mm
        info["openblas_coretype"] = args.core
        tv = "; ".join(f"{k}: {v}" for k, v in info["torch"].items())
        log(f"bench/gpt_cpu: {info['date']}, {info['cpus']} CPUs ({info['cpu']}), kernel {info['kernel']}, load "
            f"{' '.join(info['loadavg_before'])}")
        log(f"  repo at {info['commit']} ({info['worktree_changes']} changed tracked file(s)), dsworker built "
            f"{(info['dsworker_binary'] or {}).get('mtime')}; OpenBLAS {info['openblas']}; {tv}")
        log(f"  model: gpt n_layer {args.n_layer}, n_head {args.n_head}, n_embd {args.n_embd}, seq_len {args.seq_len}, "
            f"vocab 256; batch {args.batch} ({args.batch * args.seq_len} tokens/step); {args.warmup_steps} warm-up + "
            f"{args.steps} timed steps per run; {fpt / 1e6:.2f} MFLOP/token (6 x {n_mm:,} + 12 L T C)")
        os.makedirs(os.path.join(root, "runs"))
        bench.build_sgemm()
        bench.run()
        info["loadavg_after"] = loadavg()
        info["dsworker_binary_after"] = binary_id(args.dsworker)
        if info["dsworker_binary_after"] != info["dsworker_binary"]:
            log(f"warning: {args.dsworker} changed during the benchmark (rebuilt?)")
        nparams = next((s["num_parameters"] for s in bench.samples if s.get("num_parameters")), None)
        pinfo = {s["side"]: s["peer_info"] for s in bench.samples if s.get("peer_info")}
        print()
        print(f"bench/gpt_cpu results, {info['date']}: {args.reps} runs per side and thread count, {args.warmup_steps} "
              f"warm-up + {args.steps} timed steps each; {info['cpus']} CPUs ({info['cpu']}), load "
              f"{' '.join(info['loadavg_before'])} -> {' '.join(info['loadavg_after'])}")
        print(f"model: gpt L{args.n_layer} H{args.n_head} C{args.n_embd} T{args.seq_len} V256"
              + (f", {nparams:,} parameters" if nparams else "") + f", batch {args.batch} x {args.seq_len} = "
              f"{args.batch * args.seq_len} tokens/step, AdamW, gradient_clipping 1.0, data {args.data}")
        print(f"FLOP/token = 6 N + 12 L T C = 6 x {n_mm:,} + {12 * args.n_layer * args.seq_len * args.n_embd:,} = "
              f"{fpt / 1e6:.2f} M (N = 12 L C^2 + V C: matmul weights, tied head included)")
        for side, pi in pinfo.items():
            print(f"{side}: torch {pi['torch']} ({pi['blas']}, mkldnn {pi['mkldnn']}), threads {pi['threads']}, "
                  f"{pi['optimizer']} (foreach={pi['foreach']}, fused={pi['fused']}), env {pi['env']}")
        if any(s.startswith("ours") for s in args.sides):
            print(f"ours: dsworker, OMP_NUM_THREADS = threads (kernels and OpenBLAS {info['openblas']} OpenMP build on one "
                  f"pool; core fixed by dsworker's re-exec)")
        print("tokens/s: per run, timed tokens / timed seconds; median over runs (min-max of runs). Peak RSS: "
              "ru_maxrss of the process, median (min-max). GFLOP/s = tokens/s x FLOP/token; % of the GEMM peak.")
        print()
        print(summary(bench, info), flush=True)
        failed = [s for s in bench.samples if not s["ok"]]
        if failed:
            print(f"\n{len(failed)} run(s) failed; see the lines marked FAILED above")
            rc = 1
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"info": info, "args": vars(args), "probes": bench.probes, "samples": bench.samples}, f,
                          indent=1)
            log(f"wrote {args.json}")
    except KeyboardInterrupt:
        log("interrupted: cleaning up")
        rc = 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            if bench.current is not None:
                try:
                    os.killpg(bench.current.pid, signal.SIGKILL)
                except OSError:
                    pass
        finally:
            if args.keep:
                log(f"kept {root}")
            else:
                shutil.rmtree(root, ignore_errors=True)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
    return rc


if __name__ == "__main__":
    sys.exit(main())
