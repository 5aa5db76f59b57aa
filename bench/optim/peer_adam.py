"""bench/optim's peers: one AdamW optimizer of PyTorch or DeepSpeed stepping N fp32 parameters; prints one JSON line.

    peer_adam.py --impl default|foreach|fused|deepspeed --params N --steps S --threads T
"""
import argparse, json, statistics, time

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--impl", choices=("default", "foreach", "fused", "deepspeed"), required=True)
    p.add_argument("--params", type=int, default=50_000_000)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    n = a.params
    param = torch.nn.Parameter((torch.arange(n, dtype=torch.float32) % 1000) * 1e-3)
    param.grad = (torch.arange(n, dtype=torch.float32) % 7) * 1e-2 - 0.03
    if a.impl == "deepspeed":
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        opt = DeepSpeedCPUAdam([param], lr=1e-3, weight_decay=0.01, adamw_mode=True)
    else:
        kw = {"foreach": True} if a.impl == "foreach" else {"fused": True} if a.impl == "fused" else {"foreach": False}
        opt = torch.optim.AdamW([param], lr=1e-3, weight_decay=0.01, **kw)
    for _ in range(2):
        opt.step()
    ms = []
    for _ in range(a.steps):
        t = time.perf_counter()
        opt.step()
        ms.append((time.perf_counter() - t) * 1e3)
    median = statistics.median(ms)
    print(json.dumps({"side": a.impl, "threads": a.threads, "params": n, "gparams_per_s": n / (median / 1e3) / 1e9,
                      "median_ms": median, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
