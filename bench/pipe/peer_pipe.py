#!/usr/bin/env python3
"""The DeepSpeed side of bench/pipe: the `gpt` plugin's PyTorch twin (tests/integration/torch_gpt.py) as a DeepSpeed
PipelineModule trained by its PipelineEngine (1F1B over gloo on the CPU), one rank per process, started by dsrun.

    peer_pipe.py --config CFG.json --steps N --metrics M.jsonl

CFG.json is the ds_config dsworker gets: its "pipeline" block gives the stages and the partition method (DeepSpeed
reads both from the PipelineModule, so they are passed there), its "model" block the GPTConfig, data.path the bytes
to train on; the rest (batch sizes, optimizer, clipping, zero_optimization) goes to deepspeed.initialize unchanged.
Layers, as the plugin's: embed (a TiedLayerSpec owning wte), the blocks, head (ln_f, then the tied wte as the LM head:
a second TiedLayerSpec with a forward_fn), the cross-entropy as the module's loss_fn. Each rank writes one JSON line
per step to M.jsonl (rank 0 alone): {"step", "loss", "seconds"} with seconds the wall time
of engine.train_batch() (which runs the whole step: every micro-batch, the reductions, the optimizer).
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def corpus(path):
    """The bytes of a file, or of the regular files under a directory in path-byte order (runtime/data/corpus.h)."""
    if os.path.isfile(path):
        files = [path]
    else:
        files = sorted((os.path.join(r, n) for r, _, ns in os.walk(path) for n in ns), key=lambda p: p.encode())
    return b"".join(open(f, "rb").read() for f in files if os.path.isfile(f))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--metrics", required=True)
    args = p.parse_args()

    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import deepspeed
    from deepspeed.pipe import LayerSpec, PipelineModule, TiedLayerSpec

    sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
    from torch_gpt import LN_EPS, Block, Embed, GPTConfig

    threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
    torch.set_num_threads(threads)
    cfg = json.load(open(args.config))
    pipeline = cfg.pop("pipeline")
    model_cfg = GPTConfig(**cfg.pop("model"))
    data_path = cfg.pop("data")["path"]
    c = model_cfg

    class LnF(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_f = nn.LayerNorm(c.n_embd, eps=LN_EPS)

        def forward(self, x):
            return self.ln_f(x)

    def logits(embed, x):
        return x @ embed.wte.t()

    def loss_fn(out, target):
        return F.cross_entropy(out.reshape(-1, c.vocab_size), target.reshape(-1))

    deepspeed.init_distributed(dist_backend="gloo")
    layers = [TiedLayerSpec("embed", Embed, c, tied_weight_attr=["wte"])]
    layers += [LayerSpec(Block, c) for _ in range(c.n_layer)]
    layers += [LayerSpec(LnF), TiedLayerSpec("embed", Embed, c, forward_fn=logits, tied_weight_attr=["wte"])]
    torch.manual_seed(1234)
    model = PipelineModule(layers=layers, loss_fn=loss_fn, num_stages=pipeline["stages"],
                           partition_method=pipeline.get("partition", "parameters"))
    for name, param in model.named_parameters():  # GPT-2's init, as the plugin's
        if param.dim() == 2:
            nn.init.normal_(param, 0.0, c.init_std)
    engine, _, _, _ = deepspeed.initialize(model=model, config=cfg,
                                           model_parameters=[q for q in model.parameters() if q.requires_grad])

    text = torch.frombuffer(bytearray(corpus(data_path)), dtype=torch.uint8).long()
    micro = cfg["train_micro_batch_size_per_gpu"]
    generator = torch.Generator().manual_seed(7 + engine.grid.get_data_parallel_rank())

    def batches():
        while True:
            starts = torch.randint(0, len(text) - c.seq_len - 1, (micro,), generator=generator)
            x = torch.stack([text[s:s + c.seq_len] for s in starts])
            y = torch.stack([text[s + 1:s + 1 + c.seq_len] for s in starts])
            yield x, y

    data = batches()
    rank = int(os.environ.get("RANK", "0"))
    with open(args.metrics if rank == 0 else os.devnull, "w") as out:
        for step in range(1, args.steps + 1):
            start = time.perf_counter()
            loss = engine.train_batch(data_iter=data)
            seconds = time.perf_counter() - start
            out.write(json.dumps({"step": step, "loss": float(loss), "seconds": seconds}) + "\n")
            out.flush()


if __name__ == "__main__":
    main()
