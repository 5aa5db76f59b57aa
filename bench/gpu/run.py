#!/usr/bin/env python3
"""GPU benchmarks (need an NVIDIA GPU and a CUDA build): dsrun's kernels against PyTorch on the same GPU, in one run.

Run (build/bench/gpu_bench is built where nvcc is: scripts/build.sh), with a python that has a CUDA torch:
    python3 bench/gpu/run.py [--benches adam,gemm,linears,rowsums,attention,attention128,gpt,gpt_bf16,gpt_bf16_fused,gpt_fp16,nccl] [--reps 3]
                             [--steps 20] [--nccl_bytes N] [--json PATH]

adam       one fused AdamW step over --params fp32 parameters (124M, GPT-2's count): ours kernels/cuda/adam.cuh
           (bit-identical to the CPU optimizer), the peer torch.optim.AdamW(fused=True). An fp32 AdamW step reads
           parameters, gradients and both moments and writes parameters and moments, 28 bytes per parameter, so its
           bound is a device-to-device copy of the same bytes, measured by each side (cudaMemcpyAsync; torch's copy_).
gemm       an --size³ bf16 product, fp32 accumulation: ours kernels/cuda/gemm.h (cuBLASLt), the peer torch.matmul.
linears    GPT-2's four linear layers' forward products (batch --gpt_batch x 1024 rows) in fp32 as the CUDA backend
           runs them, accumulated onto the bias in the output: ours gemm.h, the peer out.addmm_(x, w.t()) (TF32 off).
rowsums    the two backward ops that sum over GPT-2's rows (batch --gpt_batch x 1024, 768 columns): LayerNorm's
           (dx, dgamma, dbeta) and the token + position embedding's (vocabulary 50257, uniform random tokens): ours
           kernels/cuda/layernorm.cuh and elementwise.cuh, the peer the aten ops autograd runs for them.
attention  causal self-attention at GPT-2's shape (batch 8, context 1024, 12 heads of 64), forward and
           forward + backward in fp32: ours kernels/cuda/attention.cuh, the peer scaled_dot_product_attention;
           also both with bf16 products (ours: the fused kernel, kernels/cuda/flash_attention.cuh, and bf16 GEMMs
           between fp32 softmax rows; torch: flash attention).
attention128 the same with heads of 128 (6 of them: GPT-3's and Llama's head size), where the fused kernel pads
           nothing and splits its dK/dV columns between two blocks.
gpt        GPT-2 124M (12 layers x 768, context 1024, vocabulary 50257, batch --gpt_batch) training steps in fp32:
           ours the gpt plugin on the CUDA backend with AdamW (worker/device_model.h), the peer the same model in
           torch (TF32 off, fused AdamW): tokens/s and the model's TFLOP/s (6·Ψ + 12·L·T·C per token).
gpt_bf16   the same with bf16 products: ours the backend's bf16 matmuls and attention products (fp32 parameters),
           the peer under torch.autocast(bfloat16).
gpt_bf16_fused  gpt_bf16 with our attention through the fused kernel (DS_CUDA_ATTENTION=fused) rather than the
           default GEMM form: whether the fused kernel should become the default.
gpt_fp16   the same with fp16 products (the peer: torch.autocast(float16)).
nccl       bus bandwidth of all-reduce, reduce-scatter, all-gather and broadcast over every visible GPU, --nccl_bytes
           fp32 buffers (256 MiB): ours runtime/comm's NCCL group (one thread rank per GPU), the peer
           torch.distributed's NCCL backend (one process per GPU); busbw as nccl-tests define it (0 on one GPU).
Each side a fresh process per repetition, interleaved; reported: the median over repetitions and ours / torch.
"""
import argparse, json, os, statistics, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def options(a, bench):
    if bench == "adam":
        return ["--params", str(a.params), "--steps", str(a.steps)]
    if bench == "linears":
        return ["--batch", str(a.gpt_batch), "--seq", "1024", "--embd", "768", "--steps", str(a.steps)]
    if bench == "gemm":
        return ["--size", str(a.size), "--steps", str(a.steps)]
    if bench == "rowsums":
        return ["--batch", str(a.gpt_batch), "--seq", "1024", "--embd", "768", "--vocab", "50257", "--steps", str(a.steps)]
    if bench == "nccl":
        return ["--bytes", str(a.nccl_bytes), "--steps", str(a.steps)]
    if bench in GPT_BENCHES:
        return ["--batch", str(a.gpt_batch), "--seq", "1024", "--layers", "12", "--heads", "12", "--embd", "768",
                "--vocab", "50257", "--steps", str(min(a.steps, 10))]
    heads, head_dim = attention_heads(bench)
    return ["--batch", "8", "--seq", "1024", "--heads", str(heads), "--head_dim", str(head_dim), "--steps", str(a.steps)]


GPT_BENCHES = ("gpt", "gpt_bf16", "gpt_bf16_fused", "gpt_fp16")


def attention_heads(bench):  # (heads, head size) of an attention bench
    return (6, 128) if bench == "attention128" else (12, 64)


def run_side(a, bench, side):
    command = "attention" if bench.startswith("attention") else bench.removesuffix("_fused")
    argv = ([a.ours] if side == "ours" else [a.python, os.path.join(HERE, "peer_torch.py")]) + [command] + options(a, bench)
    env = dict(os.environ, DS_CUDA_ATTENTION="fused") if bench.endswith("_fused") else None
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    if r.returncode != 0:
        return {"side": side, "bench": bench, "error": (r.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def median(samples, side, key):
    values = [s[key] for s in samples if s["side"] == side and s.get(key) is not None]
    return statistics.median(values) if values else None


def report(a, bench, samples):
    errors = {s["side"]: s["error"] for s in samples if "error" in s}
    for side, error in errors.items():
        print(f"  {side:5} failed: {error}")
    if bench == "adam":
        moved = 28.0 * a.params
        print(f"AdamW on {a.params:,} fp32 parameters (28 bytes each), mean of {a.steps} steps, median of {a.reps} runs")
        for side in ("ours", "torch"):
            adam, copy = median(samples, side, "adam_ms"), median(samples, side, "copy_ms")
            if adam:
                print(f"  {side:5} AdamW {adam:7.3f} ms  {moved / adam / 1e6:6.0f} GB/s   copy {moved / copy / 1e6:6.0f} GB/s"
                      f"   AdamW / copy bandwidth {copy / adam:4.0%}")
        ours, torch = median(samples, "ours", "adam_ms"), median(samples, "torch", "adam_ms")
        if ours and torch:
            print(f"  ours / torch (step rate): {torch / ours:.2f}x")
    elif bench == "gemm":
        print(f"bf16 GEMM {a.size}³, mean of {a.steps} products, median of {a.reps} runs")
        for side in ("ours", "torch"):
            t = median(samples, side, "tflops")
            if t:
                print(f"  {side:5} {t:6.0f} TFLOP/s")
        ours, torch = median(samples, "ours", "tflops"), median(samples, "torch", "tflops")
        if ours and torch:
            print(f"  ours / torch: {ours / torch:.2f}x")
    elif bench == "linears":
        print(f"GPT-2's linear layers' forward products, fp32, {a.gpt_batch * 1024} rows, mean of {a.steps}, median of {a.reps} runs")
        for name in ("c_attn", "attn_c_proj", "c_fc", "mlp_c_proj"):
            ours, torch = (median(samples, side, f"{name}_ms") for side in ("ours", "torch"))
            if ours and torch:
                print(f"  {name:12} ours {ours:7.3f} ms  torch {torch:7.3f} ms  ours / torch (rate): {torch / ours:.2f}x")
    elif bench == "rowsums":
        print(f"backward ops summing over rows, {a.gpt_batch * 1024} rows x 768, mean of {a.steps}, median of {a.reps} runs")
        for name, what in (("layernorm_backward", "LayerNorm backward"), ("embedding_backward", "embedding backward")):
            ours, torch = (median(samples, side, f"{name}_ms") for side in ("ours", "torch"))
            if ours and torch:
                print(f"  {what:19} ours {ours:7.3f} ms  torch {torch:7.3f} ms  ours / torch (rate): {torch / ours:.2f}x")
    elif bench == "nccl":
        ranks = next((s["ranks"] for s in samples if "ranks" in s), "?")
        print(f"NCCL collectives over {ranks} GPUs, {a.nccl_bytes} bytes fp32, mean of {a.steps} calls, median of "
              f"{a.reps} runs; busbw GB/s (10^9 B/s)")
        for op in ("allreduce", "reduce_scatter", "allgather", "broadcast"):
            (ours_us, torch_us), (ours_bw, torch_bw) = ((median(samples, side, f"{op}_{key}") for side in ("ours", "torch"))
                                                        for key in ("us", "busbw"))
            if ours_us and torch_us:
                print(f"  {op:15} ours {ours_us:9.1f} us {ours_bw:7.1f} GB/s   torch {torch_us:9.1f} us {torch_bw:7.1f} GB/s"
                      f"   ours / torch (rate): {torch_us / ours_us:.2f}x")
    elif bench in GPT_BENCHES:
        kind = "fp32" if bench == "gpt" else f"{bench[4:8]} products (torch: autocast)"
        if bench.endswith("_fused"):
            kind += ", our attention through the fused kernel"
        print(f"GPT-2 124M training steps, {kind}, batch {a.gpt_batch} x 1024 tokens, median of {a.reps} runs")
        for side in ("ours", "torch"):
            ms, tps, tf = (median(samples, side, k) for k in ("step_ms", "tokens_per_s", "model_tflops"))
            if ms:
                print(f"  {side:5} {ms:8.1f} ms/step  {tps:8.0f} tokens/s  {tf:5.1f} model TFLOP/s")
        ours, torch = median(samples, "ours", "tokens_per_s"), median(samples, "torch", "tokens_per_s")
        if ours and torch:
            print(f"  ours / torch (tokens/s): {ours / torch:.2f}x")
    else:
        heads, head_dim = attention_heads(bench)
        print(f"causal attention fp32, batch 8 x context 1024 x {heads} heads x {head_dim}, mean of {a.steps} passes, "
              f"median of {a.reps} runs")
        for side in ("ours", "torch"):
            f, fb = median(samples, side, "forward_ms"), median(samples, side, "forward_backward_ms")
            if f:
                print(f"  {side:5} forward {f:8.3f} ms   forward + backward {fb:8.3f} ms")
        ours, torch = median(samples, "ours", "forward_backward_ms"), median(samples, "torch", "forward_backward_ms")
        if ours and torch:
            print(f"  ours / torch (fp32 forward + backward rate): {torch / ours:.2f}x")
        for side, what, key in (("ours", "bf16 fused", "bf16"), ("ours", "bf16 GEMMs", "bf16_gemm"),
                                ("torch", "bf16 (flash)", "bf16")):
            f, fb = median(samples, side, f"{key}_forward_ms"), median(samples, side, f"{key}_forward_backward_ms")
            if f:
                print(f"  {side:5} {what}: forward {f:8.3f} ms   forward + backward {fb:8.3f} ms")
        ours, torch = (median(samples, side, "bf16_forward_backward_ms") for side in ("ours", "torch"))
        if ours and torch:
            print(f"  ours / torch (bf16 forward + backward rate): {torch / ours:.2f}x")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--benches", default="adam,gemm,linears,rowsums,attention,attention128,gpt,gpt_bf16,gpt_bf16_fused,gpt_fp16,nccl")
    p.add_argument("--nccl_bytes", type=int, default=256 << 20)
    p.add_argument("--gpt_batch", type=int, default=8)
    p.add_argument("--params", type=int, default=124_000_000)
    p.add_argument("--size", type=int, default=8192)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--ours", default=os.path.join(REPO, "build", "bench", "gpu_bench"))
    p.add_argument("--python", default=sys.executable, help="a python with a CUDA torch (default: this one)")
    p.add_argument("--json", metavar="PATH")
    a = p.parse_args()
    everything = []
    for bench in [b for b in a.benches.split(",") if b]:
        samples = []
        for rep in range(a.reps):
            for side in ("ours", "torch"):
                s = run_side(a, bench, side)
                samples.append(s)
                print(f"{bench} rep {rep + 1} {side}: " + json.dumps(s), file=sys.stderr, flush=True)
        device = next((s["device"] for s in samples if "device" in s), None)
        if device:
            print(f"[{device}]")
        report(a, bench, samples)
        everything += samples
    if a.json:
        with open(a.json, "w") as f:
            json.dump(everything, f, indent=1)


if __name__ == "__main__":
    main()
