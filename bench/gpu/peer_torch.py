"""bench/gpu's peer: PyTorch on the same GPU; prints one JSON line.

    peer_torch.py adam --params N --steps S
    peer_torch.py gemm --size N --steps S
    peer_torch.py attention --batch B --seq T --heads H --head_dim D --steps S
adam: torch.optim.AdamW(fused=True) stepping N fp32 parameters, and torch's device-to-device copy of 14·N bytes
(the 28·N bytes an fp32 AdamW step moves). gemm: torch.matmul of two N x N bf16 matrices. attention:
torch.nn.functional.scaled_dot_product_attention(is_causal=True) on fp32 q, k, v [B, H, T, D] (what ours computes),
forward and forward + backward; also in bf16 (flash attention), for reference. Each the mean over S steps after 3
untimed ones, by CUDA events.
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


def gemm(a):
    x = torch.full((a.size, a.size), 0.0115, dtype=torch.bfloat16, device="cuda")
    y = torch.full((a.size, a.size), 0.0115, dtype=torch.bfloat16, device="cuda")
    ms = mean_ms(a.steps, lambda: torch.matmul(x, y))
    return {"side": "torch", "bench": "gemm", "size": a.size, "ms": ms, "tflops": 2.0 * a.size ** 3 / ms / 1e9,
            "torch": torch.__version__}


def attention(a):
    def times(dtype):
        q, k, v = (torch.randn(a.batch, a.heads, a.seq, a.head_dim, device="cuda", dtype=dtype, requires_grad=True)
                   for _ in range(3))
        dout = torch.randn(a.batch, a.heads, a.seq, a.head_dim, device="cuda", dtype=dtype)
        sdpa = torch.nn.functional.scaled_dot_product_attention
        with torch.no_grad():
            forward = mean_ms(a.steps, lambda: sdpa(q, k, v, is_causal=True))
        both = mean_ms(a.steps, lambda: sdpa(q, k, v, is_causal=True).backward(dout))
        return forward, both
    f32, f32_both = times(torch.float32)
    bf16, bf16_both = times(torch.bfloat16)
    return {"side": "torch", "bench": "attention", "shape": [a.batch, a.seq, a.heads, a.head_dim], "forward_ms": f32,
            "forward_backward_ms": f32_both, "bf16_forward_ms": bf16, "bf16_forward_backward_ms": bf16_both,
            "torch": torch.__version__}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("bench", choices=("adam", "gemm", "attention"))
    p.add_argument("--params", type=int, default=124_000_000)
    p.add_argument("--size", type=int, default=8192)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--head_dim", type=int, default=64)
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()
    print(json.dumps({"adam": adam, "gemm": gemm, "attention": attention}[a.bench](a)))


if __name__ == "__main__":
    main()
