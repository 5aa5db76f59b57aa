#!/usr/bin/python3
"""The peer side of bench/zero/run.py: one training rank in PyTorch, the same MLP and batch as `dsworker --model mlp`.

Started by dsrun (which sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), one process per rank:
    dsrun --num_gpus 2 python3 bench/zero/peer_train.py --impl ddp --config ds_config.json --steps 25 --metrics m.jsonl

--impl deepspeed  DeepSpeed's engine: deepspeed.initialize(model, config=<ds_config without "model">), then
                  engine(x), engine.backward(loss), engine.step(); ZeRO stage, optimizer, clipping from the config.
--impl ddp        PyTorch with the Gloo backend, what the ds_config asks for done by hand:
                    stage 0: DistributedDataParallel + torch.optim.Adam
                    stage 1: DistributedDataParallel + ZeroRedundancyOptimizer(torch.optim.Adam) (optimizer state
                             sharded, gradients all-reduced whole, updated parameters broadcast)
                    stage 2: FullyShardedDataParallel(SHARD_GRAD_OP) + torch.optim.Adam
                    stage 3: FullyShardedDataParallel(FULL_SHARD) + torch.optim.Adam
                  gradient_clipping > 0: clip_grad_norm_ (FSDP: its own clip_grad_norm_).
A stage the implementation cannot run here prints "peer unavailable: <reason>" and exits 3 (Debian's torch 1.13 on
Python 3.11: FSDP fails to import, and torch 1.x's FSDP computes on CUDA only anyway; DeepSpeed 0.19.8's engine fails in
deepspeed.initialize, as it calls torch 2.0's hook API). The zero_optimization block's bucket sizes and stage3_* settings are DeepSpeed's; the ddp peer ignores them.

Model ("model" block of the config, defaults as models/mlp/mlp.cpp): Linear(in_features, hidden) -> ReLU ->
[Linear(hidden, hidden) -> ReLU] x (layers - 1) -> Linear(hidden, classes); mean softmax cross-entropy; PyTorch's
default init. Data: x uniform in [-1, 1)^in_features, label = argmax(T x) for a fixed random teacher T (the same
kind of learnable synthetic data as the mlp plugin, not the same numbers), made per micro-batch as dsworker does.

Step (timed on every rank, written by rank 0): from zero_grad to after optimizer.step() and the all-reduce of the
step's loss (dsworker also averages the loss across ranks every step): micro-batch generation, forward, backward
(with DDP's bucketed all-reduce), clipping, the optimizer step. --metrics writes one JSON line per step:
{"step", "loss", "seconds", "samples_per_sec", "samples"}; "seconds" is the step's wall time on rank 0.

Rank 0 also prints one line "PEER_INFO {json}" with what actually ran: implementation, optimizer class and its
foreach flag, torch/OpenBLAS threads, the OpenBLAS core, and the bytes of parameters, gradients and optimizer
state held by this rank after the first step.

--blas-fix auto (default) does what dsworker does at start-up: Debian's OpenBLAS 0.3.21 does not recognise some
recent CPUs and falls back to its Prescott (SSE3) kernels; if the core it picked is below what the CPU supports
(AVX-512 -> SkylakeX, AVX2 -> Haswell, AVX -> SandyBridge), re-execute with OPENBLAS_CORETYPE set. A value already
in the environment is kept. --blas-fix off leaves OpenBLAS alone.
"""
import argparse
import ctypes
import json
import os
import sys
import time

# ---------------------------------------------------------------------------------------------------------------
# OpenBLAS core fix (mirrors kernels/cpu/blas.cpp: blas_fix_coretype)

_CORE_TIER = {
    "katmai": 0, "coppermine": 0, "northwood": 0, "prescott": 0, "banias": 0, "atom": 0, "core2": 0, "penryn": 0,
    "dunnington": 0, "nehalem": 0, "opteron": 0, "opteron_sse3": 0, "barcelona": 0, "nano": 0, "bobcat": 0,
    "athlon": 0, "generic": 0, "sandybridge": 1, "bulldozer": 1, "piledriver": 1, "steamroller": 1, "excavator": 1,
    "haswell": 2, "zen": 2, "skylakex": 3, "cooperlake": 3, "sapphirerapids": 3,
}
_TIER_CORE = {3: "SkylakeX", 2: "Haswell", 1: "SandyBridge"}


def cpu_tier():
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        return 0
    if {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"} <= flags:
        return 3
    if {"avx2", "fma"} <= flags:
        return 2
    if "avx" in flags:
        return 1
    return 0


def openblas():
    """The OpenBLAS this process has loaded (torch's libblas.so.3 is OpenBLAS on Debian), or None."""
    paths = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.split()[-1] if len(line.split()) >= 6 else ""
                if ("openblas" in p or "libblas" in p) and p not in paths:
                    paths.append(p)
    except OSError:
        pass
    for p in paths + ["libopenblas.so.0"]:
        try:
            lib = ctypes.CDLL(p)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            lib.openblas_get_num_threads.restype = ctypes.c_int
            return lib
        except (OSError, AttributeError):
            continue
    return None


def blas_fix(mode):
    if mode != "auto" or "OPENBLAS_CORETYPE" in os.environ:
        return
    lib = openblas()
    if lib is None:
        return
    core = (lib.openblas_get_corename() or b"").decode()
    have = _CORE_TIER.get(core.lower(), -1)
    can = cpu_tier()
    if 0 <= have < can:
        os.environ["OPENBLAS_CORETYPE"] = _TIER_CORE[can]
        os.execv(sys.executable, [sys.executable] + sys.argv)


# ---------------------------------------------------------------------------------------------------------------


def torch_frame(e, torch):
    """Where in torch an exception was raised: the innermost frame under torch's package directory."""
    import traceback

    base = os.path.dirname(os.path.dirname(torch.__file__))
    tb = traceback.extract_tb(e.__traceback__)
    frames = [f for f in tb if f.filename.startswith(os.path.dirname(torch.__file__))]
    f = frames[-1] if frames else tb[-1]
    return f"{os.path.relpath(f.filename, base) if f.filename.startswith(base) else f.filename}:{f.lineno} {f.name}"


def unavailable(reason):
    print(f"peer unavailable: {reason}", flush=True)
    sys.exit(3)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--impl", choices=("ddp", "deepspeed"), required=True)
    p.add_argument("--config", required=True, help="ds_config JSON with a \"model\" block (as for dsworker)")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--metrics", help="JSON lines, one per step (rank 0)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    p.add_argument("--foreach", choices=("default", "on", "off"), default="default",
                   help="torch.optim.Adam's foreach flag (ddp; default: torch's default)")
    p.add_argument("--blas-fix", choices=("auto", "off"), default="auto")
    p.add_argument("--seed", type=int, default=42)
    args = p.parse_args()

    blas_fix(args.blas_fix)

    import torch
    import torch.distributed as dist

    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass

    with open(args.config) as f:
        cfg = json.load(f)
    mcfg = dict(cfg.pop("model", {}) or {})
    in_f = int(mcfg.get("in_features", 32))
    hidden = int(mcfg.get("hidden", 128))
    classes = int(mcfg.get("classes", 10))
    layers = int(mcfg.get("layers", 1))
    mb = int(cfg.get("train_micro_batch_size_per_gpu", 1))
    gas = int(cfg.get("gradient_accumulation_steps", 1))
    clip = float(cfg.get("gradient_clipping", 0.0) or 0.0)
    stage = int((cfg.get("zero_optimization") or {}).get("stage", 0))
    opt_cfg = cfg.get("optimizer") or {"type": "Adam", "params": {}}
    if opt_cfg.get("type", "").lower() not in ("adam", "adamw"):
        unavailable(f"optimizer {opt_cfg.get('type')!r}: this peer script only does Adam/AdamW")
    op = dict(opt_cfg.get("params") or {})
    adam_kw = {"lr": op.get("lr", 1e-3), "betas": tuple(op.get("betas", (0.9, 0.999))), "eps": op.get("eps", 1e-8),
               "weight_decay": op.get("weight_decay", 0.0)}
    if args.foreach != "default":
        adam_kw["foreach"] = args.foreach == "on"
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))

    torch.manual_seed(args.seed)
    mods = []
    width = in_f
    for _ in range(layers):
        mods += [torch.nn.Linear(width, hidden), torch.nn.ReLU()]
        width = hidden
    mods.append(torch.nn.Linear(width, classes))
    model = torch.nn.Sequential(*mods)
    num_params = sum(p.numel() for p in model.parameters())
    loss_fn = torch.nn.CrossEntropyLoss()

    info = {"impl": args.impl, "stage": stage, "num_parameters": num_params, "torch": torch.__version__,
            "world_size": world}
    engine = opt = None
    if args.impl == "deepspeed":
        import deepspeed

        info["deepspeed"] = deepspeed.__version__
        deepspeed.init_distributed(dist_backend=None)
        info["backend"] = dist.get_backend()
        try:
            engine, opt, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
        except Exception as e:  # noqa: BLE001: the reason is the result here
            import traceback

            tb = traceback.extract_tb(e.__traceback__)[-1]
            where = f"{os.path.relpath(tb.filename, os.path.dirname(deepspeed.__file__))}:{tb.lineno} {tb.name}"
            unavailable(f"deepspeed.initialize: {type(e).__name__}: {e} (at {where})")
        basic = getattr(engine, "basic_optimizer", None)
        info["optimizer"] = f"{type(opt).__module__}.{type(opt).__name__}"
        if basic is not None:
            info["basic_optimizer"] = f"{type(basic).__module__}.{type(basic).__name__}"
        train_model = engine
    else:
        dist.init_process_group("gloo")
        info["backend"] = dist.get_backend()
        if stage == 0:
            train_model = torch.nn.parallel.DistributedDataParallel(model)
            opt = torch.optim.Adam(train_model.parameters(), **adam_kw)
            info["wrapper"] = "DistributedDataParallel (bucket_cap_mb 25, the default)"
        elif stage == 1:
            from torch.distributed.optim import ZeroRedundancyOptimizer

            train_model = torch.nn.parallel.DistributedDataParallel(model)
            opt = ZeroRedundancyOptimizer(train_model.parameters(), optimizer_class=torch.optim.Adam, **adam_kw)
            info["wrapper"] = "DistributedDataParallel (bucket_cap_mb 25) + ZeroRedundancyOptimizer"
        elif stage in (2, 3):
            strategy = "SHARD_GRAD_OP" if stage == 2 else "FULL_SHARD"
            cuda_only = ""
            if int(torch.__version__.split(".")[0]) < 2 and not torch.cuda.is_available():
                # torch 1.x's FullyShardedDataParallel._get_compute_device: "For now, the compute device is always
                # a CUDA GPU device" (a module on CPU gets torch.device("cuda", torch.cuda.current_device())).
                cuda_only = (f"; past the import, FSDP in torch {torch.__version__} computes on CUDA only "
                             "(FullyShardedDataParallel._get_compute_device takes torch.cuda.current_device() for "
                             "a module on CPU), and this torch has no CUDA")
            try:
                from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
            except Exception as e:  # noqa: BLE001
                why = ""
                if isinstance(e, ValueError) and "mutable default" in str(e) and "TensorProperties" in str(e):
                    why = ("; since Python 3.11, dataclasses reject every unhashable default value (up to 3.10 only "
                           "list, dict and set), and this torch's @dataclass ShardedTensorMetadata has "
                           "`field(default=TensorProperties())`")
                unavailable(f"ZeRO stage {stage}'s counterpart is FSDP({strategy}), and `from torch.distributed.fsdp "
                            f"import FullyShardedDataParallel` fails on torch {torch.__version__} / Python "
                            f"{sys.version.split()[0]}: {type(e).__name__}: {e} (at {torch_frame(e, torch)}){why}"
                            + cuda_only)
            try:
                train_model = FSDP(model, sharding_strategy=getattr(ShardingStrategy, strategy))
            except Exception as e:  # noqa: BLE001
                unavailable(f"FSDP({strategy}) with the module on CPU, torch {torch.__version__}: "
                            f"{type(e).__name__}: {e} (at {torch_frame(e, torch)})")
            opt = torch.optim.Adam(train_model.parameters(), **adam_kw)
            info["wrapper"] = f"FullyShardedDataParallel({strategy.name})"
        else:
            unavailable(f"zero_optimization.stage {stage}")
        inner = getattr(opt, "optim", opt)
        info["optimizer"] = f"{type(opt).__module__}.{type(opt).__name__}"
        info["foreach"] = inner.param_groups[0].get("foreach")
        info["clip"] = clip

    # Data: a fixed teacher; each rank draws its own micro-batches.
    gen = torch.Generator().manual_seed(1234)
    teacher = torch.rand(classes, in_f, generator=gen) * 2 - 1
    gen.manual_seed(1000 + rank)

    def batch():
        x = torch.rand(mb, in_f, generator=gen) * 2 - 1
        return x, (x @ teacher.t()).argmax(dim=1)

    out = open(args.metrics, "w") if (args.metrics and rank == 0) else None
    global_batch = mb * gas * world
    for step in range(1, args.steps + 1):
        t0 = time.perf_counter()
        loss_sum = torch.zeros(())
        if engine is not None:
            for _ in range(gas):
                x, y = batch()
                loss = loss_fn(engine(x), y)
                engine.backward(loss)
                engine.step()
                loss_sum += loss.detach()
        else:
            opt.zero_grad(set_to_none=False)
            for m in range(gas):
                x, y = batch()
                if m < gas - 1 and hasattr(train_model, "no_sync"):
                    with train_model.no_sync():
                        loss = loss_fn(train_model(x), y) / gas
                        loss.backward()
                else:
                    loss = loss_fn(train_model(x), y) / gas
                    loss.backward()
                loss_sum += loss.detach() * gas
            if clip > 0:
                if hasattr(train_model, "clip_grad_norm_"):
                    train_model.clip_grad_norm_(clip)
                else:
                    torch.nn.utils.clip_grad_norm_(train_model.parameters(), clip)
            opt.step()
        loss_avg = loss_sum / gas
        dist.all_reduce(loss_avg)
        loss_avg /= world
        seconds = time.perf_counter() - t0
        if step == 1 and rank == 0:
            params = [p for p in (engine.module if engine is not None else train_model).parameters()]
            info["param_bytes"] = sum(p.numel() * p.element_size() for p in params)
            info["grad_bytes"] = sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None)
            inner = getattr(opt, "optim", None) if engine is None else getattr(engine, "basic_optimizer", opt)
            inner = inner if inner is not None else opt
            state_bytes = 0
            for st in getattr(inner, "state", {}).values():
                for v in st.values():
                    if torch.is_tensor(v) and v.numel() > 1:
                        state_bytes += v.numel() * v.element_size()
            info["optimizer_state_bytes"] = state_bytes
            lib = openblas()
            if lib is not None:
                info["openblas_core"] = (lib.openblas_get_corename() or b"").decode()
                info["openblas_threads"] = lib.openblas_get_num_threads()
            info["OPENBLAS_CORETYPE"] = os.environ.get("OPENBLAS_CORETYPE")
            info["torch_threads"] = torch.get_num_threads()
            info["torch_interop_threads"] = torch.get_num_interop_threads()
            print("PEER_INFO " + json.dumps(info), flush=True)
        if out:
            out.write(json.dumps({"step": step, "loss": float(loss_avg), "seconds": seconds,
                                  "samples_per_sec": global_batch / seconds, "samples": step * global_batch}) + "\n")
            out.flush()
    if out:
        out.close()
    dist.barrier()
    if rank == 0:
        print(f"peer: done: {args.steps} steps, loss {float(loss_avg):.4f}", flush=True)


if __name__ == "__main__":
    main()
