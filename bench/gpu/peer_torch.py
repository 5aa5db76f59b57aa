"""bench/gpu's peer: PyTorch on the same GPU; prints one JSON line.

    peer_torch.py adam --params N --steps S
    peer_torch.py gemm --size N --steps S
    peer_torch.py linears --batch B --seq T --embd C --steps S
    peer_torch.py attention --batch B --seq T --heads H --head_dim D --steps S
    peer_torch.py rowsums --batch B --seq T --embd C --vocab V --steps S
    peer_torch.py gpt|gpt_bf16|gpt_fp16 --batch B --seq T --layers L --heads H --embd C --vocab V --steps S
    peer_torch.py nccl --bytes N --steps S [--ranks R]
adam: torch.optim.AdamW(fused=True) stepping N fp32 parameters, and torch's device-to-device copy of 14·N bytes
(the 28·N bytes an fp32 AdamW step moves). gemm: torch.matmul of two N x N bf16 matrices. linears: GPT-2's four
linear layers' forward products in fp32 (TF32 off), out.addmm_(x, w.t()) onto the bias already in out. attention:
torch.nn.functional.scaled_dot_product_attention(is_causal=True) on fp32 q, k, v [B, H, T, D] (what ours computes),
forward and forward + backward; also in bf16 (flash attention), for reference. rowsums: the backward ops autograd
runs for LayerNorm (aten.native_layer_norm_backward: dx, dgamma, dbeta) and for the token + position embedding
(aten.embedding_dense_backward over uniform random tokens, and the position gradient's sum over the batch). Each the mean over S steps after 3
untimed ones, by CUDA events. gpt: training steps of a GPT-2 written as the gpt plugin is (nanoGPT's model: tied LM
head, tanh GELU, causal SDPA), fp32 with TF32 off (ours never uses TF32), AdamW(fused=True), the loss read back each
step as ours does: tokens/s. gpt_bf16: the same under torch.autocast("cuda", torch.bfloat16) (fp32 parameters,
bf16 matmuls and flash attention), as ours multiplies with bf16 products; gpt_fp16 likewise with torch.float16
(no GradScaler: a timing, and ours' bench has no loss scaling either). nccl: torch.distributed's NCCL backend over
R GPUs (default: every visible one), one process each: all_reduce, reduce_scatter_tensor, all_gather_into_tensor and
broadcast of N-byte fp32 buffers, S calls back to back then a synchronize, the slowest rank's mean per call, busbw
as gpu_bench computes it.
"""
import argparse, json, os, socket, tempfile

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


def linears(a):
    torch.backends.cuda.matmul.allow_tf32 = False
    rows, c = a.batch * a.seq, a.embd
    x = torch.full((rows, 4 * c), 0.0115, device="cuda")
    w = torch.full((4 * c, 4 * c), 0.0029, device="cuda")
    result = {"side": "torch", "bench": "linears", "rows": rows, "embd": c, "torch": torch.__version__}
    for name, n, k in (("c_attn", 3 * c, c), ("attn_c_proj", c, c), ("c_fc", 4 * c, c), ("mlp_c_proj", c, 4 * c)):
        xs, ws, out = x[:, :k].contiguous(), w[:n, :k].contiguous(), torch.zeros(rows, n, device="cuda")
        ms = mean_ms(a.steps, lambda: out.addmm_(xs, ws.t()))
        result[f"{name}_ms"], result[f"{name}_tflops"] = ms, 2.0 * rows * n * k / ms / 1e9
    return result


def rowsums(a):
    rows, c, v = a.batch * a.seq, a.embd, a.vocab
    x, dy = torch.randn(rows, c, device="cuda"), torch.randn(rows, c, device="cuda")
    gamma, beta = torch.ones(c, device="cuda"), torch.zeros(c, device="cuda")
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [c], gamma, beta, 1e-5)
    layernorm_ms = mean_ms(a.steps, lambda: torch.ops.aten.native_layer_norm_backward(
        dy, x, [c], mean, rstd, gamma, beta, [True, True, True]))
    tokens = torch.randint(0, v, (rows,), device="cuda")
    dout = dy.view(a.batch, a.seq, c)
    embedding_ms = mean_ms(a.steps, lambda: (torch.ops.aten.embedding_dense_backward(dy, tokens, v, -1, False),
                                             dout.sum(0)))
    return {"side": "torch", "bench": "rowsums", "rows": rows, "embd": c, "vocab": v,
            "layernorm_backward_ms": layernorm_ms, "embedding_backward_ms": embedding_ms, "torch": torch.__version__}


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


class Block(torch.nn.Module):
    def __init__(self, c, h):
        super().__init__()
        self.h = h
        self.ln_1, self.ln_2 = torch.nn.LayerNorm(c), torch.nn.LayerNorm(c)
        self.c_attn, self.attn_proj = torch.nn.Linear(c, 3 * c), torch.nn.Linear(c, c)
        self.c_fc, self.mlp_proj = torch.nn.Linear(c, 4 * c), torch.nn.Linear(4 * c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.h, c // self.h).transpose(1, 2) for z in (q, k, v))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.mlp_proj(torch.nn.functional.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.wte, self.wpe = torch.nn.Embedding(a.vocab, a.embd), torch.nn.Embedding(a.seq, a.embd)
        self.blocks = torch.nn.ModuleList(Block(a.embd, a.heads) for _ in range(a.layers))
        self.ln_f = torch.nn.LayerNorm(a.embd)

    def forward(self, tokens, targets):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def gpt(a):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = Gpt(a).cuda()
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    tokens = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda")
    targets = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda")
    last = [0.0]

    def step():
        opt.zero_grad(set_to_none=False)
        half = {"gpt_bf16": torch.bfloat16, "gpt_fp16": torch.float16}.get(a.bench)
        with torch.autocast("cuda", dtype=half or torch.bfloat16, enabled=half is not None):
            loss = model(tokens, targets)
        loss.backward()
        opt.step()
        last[0] = loss.item()
    ms = mean_ms(a.steps, step)
    tokens_per_step = a.batch * a.seq
    flops = 6.0 * params + 12.0 * a.layers * a.seq * a.embd
    return {"side": "torch", "bench": a.bench, "device": torch.cuda.get_device_name(), "params": params,
            "batch": a.batch, "seq": a.seq, "step_ms": ms, "tokens_per_s": tokens_per_step / ms * 1e3,
            "model_tflops": flops * tokens_per_step / ms / 1e9, "loss": last[0], "torch": torch.__version__}


NCCL_OPS = ("allreduce", "reduce_scatter", "allgather", "broadcast")


def nccl_rank(rank, ranks, port, a, out_path):
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=ranks,
                            device_id=torch.device("cuda", rank))
    count = a.bytes // 4
    share = count // ranks
    x = torch.zeros(count, device="cuda")
    y = torch.zeros(count, device="cuda")
    calls = {"allreduce": lambda: dist.all_reduce(x),
             "reduce_scatter": lambda: dist.reduce_scatter_tensor(y[:share], x[:share * ranks]),
             "allgather": lambda: dist.all_gather_into_tensor(y[:share * ranks], x[:share]),
             "broadcast": lambda: dist.broadcast(x, 0)}
    seconds = []
    for op in NCCL_OPS:
        for _ in range(3):
            calls[op]()
        torch.cuda.synchronize()
        dist.barrier()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(a.steps):
            calls[op]()
        stop.record()
        stop.synchronize()
        seconds.append(start.elapsed_time(stop) / 1e3 / a.steps)
    slowest = torch.tensor(seconds, device="cuda")
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(slowest.tolist(), f)
    dist.destroy_process_group()


def nccl(a):
    import torch.multiprocessing as mp
    ranks = a.ranks or torch.cuda.device_count()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out_path = os.path.join(tmp, "seconds.json")
        mp.spawn(nccl_rank, args=(ranks, port, a, out_path), nprocs=ranks)
        with open(out_path) as f:
            seconds = json.load(f)
    count = a.bytes // 4
    shared = 4 * (count // ranks) * ranks
    moved = {"allreduce": 4 * count, "reduce_scatter": shared, "allgather": shared, "broadcast": 4 * count}
    factor = {"allreduce": 2 * (ranks - 1) / ranks, "reduce_scatter": (ranks - 1) / ranks,
              "allgather": (ranks - 1) / ranks, "broadcast": 1.0}
    result = {"side": "torch", "bench": "nccl", "device": torch.cuda.get_device_name(), "ranks": ranks,
              "bytes": a.bytes, "torch": torch.__version__}
    for op, t in zip(NCCL_OPS, seconds):
        result[f"{op}_us"] = t * 1e6
        result[f"{op}_busbw"] = moved[op] / t / 1e9 * factor[op]
    return result


def main():
    p = argparse.ArgumentParser()
    p.add_argument("bench", choices=("adam", "gemm", "linears", "attention", "rowsums", "gpt", "gpt_bf16", "gpt_fp16", "nccl"))
    p.add_argument("--params", type=int, default=124_000_000)
    p.add_argument("--size", type=int, default=8192)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--head_dim", type=int, default=64)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--embd", type=int, default=768)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--bytes", type=int, default=256 << 20)
    p.add_argument("--ranks", type=int, default=0)
    a = p.parse_args()
    print(json.dumps({"adam": adam, "gemm": gemm, "linears": linears, "attention": attention, "rowsums": rowsums, "gpt": gpt, "gpt_bf16": gpt, "gpt_fp16": gpt,
                      "nccl": nccl}[a.bench](a)))


if __name__ == "__main__":
    main()
