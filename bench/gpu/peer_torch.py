"""bench/gpu's peer: PyTorch on the same GPU; prints one JSON line.

    peer_torch.py adam --params N --steps S
adam: torch.optim.AdamW(fused=True) stepping N fp32 parameters, and torch's device-to-device copy of 14·N bytes
(the 28·N bytes an fp32 AdamW step moves), each the mean over S steps after 3 untimed ones, by CUDA events.
"""
import argparse, json

import torch


def mean_ms(steps, body):
    for _ in range(3):
        body()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        body()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / steps


def adam(a):
    n = a.params
    param = torch.nn.Parameter(torch.full((n,), 0.0115, device="cuda"))
    param.grad = torch.full((n,), 0.0029, device="cuda")
    opt = torch.optim.AdamW([param], lr=1e-3, weight_decay=0.01, fused=True)
    src = torch.ones(14 * n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy_ms = mean_ms(a.steps, lambda: dst.copy_(src))
    adam_ms = mean_ms(a.steps, opt.step)
    moved = 28.0 * n
    return {"side": "torch", "bench": "adam", "device": torch.cuda.get_device_name(), "params": n, "steps": a.steps,
            "adam_ms": adam_ms, "adam_gb_per_s": moved / adam_ms / 1e6, "copy_ms": copy_ms,
            "copy_gb_per_s": moved / copy_ms / 1e6, "torch": torch.__version__}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("bench", choices=("adam",))
    p.add_argument("--params", type=int, default=124_000_000)
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()
    print(json.dumps(adam(a)))


if __name__ == "__main__":
    main()
