#!/usr/bin/env python3
"""The PyTorch side of bench/gpt_cpu: trains tests/integration/torch_gpt.py (the twin of the `gpt` plugin: same
math, same parameter names) on one process, the way dsworker trains the plugin on one rank, and writes one JSON line
per step. Runs on any torch >= 1.13 (PyPI's in .venv-bench-torch, Debian's python3-torch under /usr/bin/python3).

    peer_train.py --config CFG.json --steps N --threads T --metrics M.jsonl [--bf16] [--adamw default|foreach|fused]

CFG.json is the ds_config dsworker gets: train_micro_batch_size_per_gpu (B), the optimizer block (AdamW lr, betas,
eps, weight_decay), gradient_clipping, the "model" block (GPTConfig) and data.path. Data: the bytes of the files
under data.path (a file or a directory, its regular files recursively in byte order of their paths, as dsworker's
corpus reads them), concatenated; each sample is a window of seq_len + 1 bytes at a uniformly random offset (inputs
= the first seq_len, targets = the last seq_len). The order differs from dsworker's; the work per step does not.

One step, timed with perf_counter from before the batch is built to after the loss is read back (what dsworker's
step time spans: batch, forward, backward, gradient norm and clipping, AdamW):
    x, y = batch(); loss = model(x, y) [under torch.autocast("cpu", bfloat16) with --bf16]; zero_grad(None);
    loss.backward(); clip_grad_norm_(params, clip); opt.step(); loss.item()
Threads: torch.set_num_threads(T) and set_num_interop_threads(1) before any work (the harness also sets
OMP_NUM_THREADS, MKL_NUM_THREADS and, for Debian's torch, OPENBLAS_NUM_THREADS = T, because torch.set_num_threads
does not reach Debian's pthread OpenBLAS).

Prints "PEER_INFO {json}" at the end: torch version and build (BLAS), threads, parameter count, the optimizer's
implementation flags, VmRSS after `import torch` and before the first step, ru_maxrss at the end (KiB).
--profile K: run torch.profiler over the last K steps and print the ops by self CPU time (for the docs).
"""
import argparse
import json
import os
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def status_kib(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return None


def expand_path(path):
    """A file, or the regular files under a directory, recursively, sorted by path bytes (runtime/data/corpus.h)."""
    if os.path.isfile(path):
        return [path]
    files = []
    for root, dirs, names in os.walk(path):
        for n in names:
            p = os.path.join(root, n)
            if os.path.isfile(p):
                files.append(p)
    return sorted(files, key=lambda p: p.encode())


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--metrics", required=True)
    p.add_argument("--bf16", action="store_true", help="forward under torch.autocast('cpu', torch.bfloat16)")
    p.add_argument("--adamw", choices=("default", "foreach", "fused"), default="default",
                   help="torch.optim.AdamW implementation (default: torch's default for CPU tensors)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--profile", type=int, default=0, metavar="K", help="profile the last K steps")
    args = p.parse_args()

    t_import = time.perf_counter()
    import torch
    t_import = time.perf_counter() - t_import
    rss_import = status_kib("VmRSS")
    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
    from torch_gpt import GPT, GPTConfig  # noqa: E402  (the plugin's twin)

    with open(args.config) as f:
        cfg = json.load(f)
    m = cfg["model"]
    gc = GPTConfig(n_layer=m["n_layer"], n_head=m["n_head"], n_embd=m["n_embd"], seq_len=m["seq_len"],
                   vocab_size=m["vocab_size"])
    B = cfg["train_micro_batch_size_per_gpu"] * cfg.get("gradient_accumulation_steps", 1)
    T = gc.seq_len
    op = cfg["optimizer"]["params"]
    clip = cfg.get("gradient_clipping", 0.0)

    data = b"".join(open(f, "rb").read() for f in expand_path(cfg["data"]["path"]))
    if len(data) < T + 2:
        raise SystemExit(f"peer_train: {cfg['data']['path']}: {len(data)} bytes, fewer than seq_len + 2")
    tokens = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(torch.int64)
    gen = torch.Generator().manual_seed(args.seed)

    def batch():
        starts = torch.randint(0, tokens.numel() - T - 1, (B,), generator=gen)
        idx = starts[:, None] + torch.arange(T + 1)[None, :]
        w = tokens[idx]
        return w[:, :-1], w[:, 1:]

    torch.manual_seed(args.seed)
    model = GPT(gc)
    params = list(model.parameters())
    kw = {}
    if args.adamw == "foreach":
        kw["foreach"] = True
    elif args.adamw == "fused":
        kw["fused"] = True
    opt = torch.optim.AdamW(params, lr=op["lr"], betas=tuple(op.get("betas", (0.9, 0.999))), eps=op.get("eps", 1e-8),
                            weight_decay=op.get("weight_decay", 0.01), **kw)
    rss_ready = status_kib("VmRSS")

    prof = None
    out = open(args.metrics, "w")
    tokens_per_step = B * T
    for step in range(1, args.steps + 1):
        if args.profile and step == args.steps - args.profile + 1:
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            prof.__enter__()
        t0 = time.perf_counter()
        x, y = batch()
        if args.bf16:
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                loss = model(x, y)
        else:
            loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(params, clip) if clip > 0 else torch.tensor(0.0)
        opt.step()
        lv = loss.item()
        dt = time.perf_counter() - t0
        out.write(json.dumps({"step": step, "loss": lv, "grad_norm": float(gnorm), "seconds": dt,
                              "tokens_per_sec": tokens_per_step / dt}) + "\n")
        out.flush()
    out.close()
    if prof is not None:
        prof.__exit__(None, None, None)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30), flush=True)

    d = opt.defaults
    info = {
        "torch": torch.__version__,
        "torch_file": os.path.dirname(torch.__file__),
        "blas": "MKL" if torch.backends.mkl.is_available() else "OpenBLAS/other (no MKL)",
        "mkldnn": torch.backends.mkldnn.is_available(),
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "num_parameters": sum(t.numel() for t in params),
        "optimizer": f"{type(opt).__module__}.{type(opt).__name__}",
        "foreach": d.get("foreach"), "fused": d.get("fused"),
        "bf16_autocast": args.bf16,
        "import_s": t_import,
        "rss_after_import_kib": rss_import,
        "rss_before_first_step_kib": rss_ready,
        "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "data_bytes": len(data),
        "env": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                               "OPENBLAS_CORETYPE")},
    }
    print("PEER_INFO " + json.dumps(info), flush=True)


if __name__ == "__main__":
    main()
