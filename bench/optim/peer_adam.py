"""bench/optim's peers: one AdamW optimizer of PyTorch or DeepSpeed stepping N fp32 parameters; prints one JSON line.

    peer_adam.py --impl default|foreach|fused|deepspeed --params N --steps S --threads T [--mixed bf16|fp16]

--mixed: the mixed-precision step of DeepSpeed's ZeRO-Offload on the CPU side (stage_1_and_2.py): fp32 gradients
of the fp32 master, unscaled in place (`grad.mul_(1 / loss_scale)`, its _unscale_and_clip_grads), the optimizer
step, and the master copied into the 16-bit parameters (`bit16.copy_(fp32)`); all three timed.
"""
import argparse, json, statistics, time

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--impl", choices=("default", "foreach", "fused", "deepspeed"), required=True)
    p.add_argument("--params", type=int, default=50_000_000)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--mixed", choices=("bf16", "fp16"))
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
    loss_scale = 1024.0
    if a.mixed:
        param.grad.mul_(loss_scale)
        bit16 = torch.empty(n, dtype=torch.bfloat16 if a.mixed == "bf16" else torch.float16)
        scaled = param.grad.clone()

    def step():
        if a.mixed:
            param.grad.copy_(scaled)  # untimed below: the next step's loss-scaled gradients
            t = time.perf_counter()
            param.grad.mul_(1.0 / loss_scale)
            opt.step()
            bit16.copy_(param.data)
            return time.perf_counter() - t
        t = time.perf_counter()
        opt.step()
        return time.perf_counter() - t

    for _ in range(2):
        step()
    ms = [step() * 1e3 for _ in range(a.steps)]
    median = statistics.median(ms)
    print(json.dumps({"side": a.impl, "mode": a.mixed or "fp32", "threads": a.threads, "params": n, "gparams_per_s": n / (median / 1e3) / 1e9,
                      "median_ms": median, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
