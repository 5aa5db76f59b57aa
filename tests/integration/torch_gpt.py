"""A PyTorch twin of dsrun's `gpt` model plugin (models/gpt/gpt.cpp): the same GPT-2-style decoder,
the same math and the same parameter names, so a state dict keyed by the engine's slot names
("embed.wte", "h0.attn.c_attn.weight", ..., "head.ln_f.bias") loads as is.

  embed: x = wte[idx] + wpe[0..T-1]                                           idx int64 [B, T] -> [B, T, C]
  h0..h{n_layer-1}: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))   pre-LN, LayerNorm eps 1e-5
      attn: c_attn -> q, k, v ([3C] split in that order, heads contiguous in each), causal softmax of
            q.k^T / sqrt(head_dim), c_proj;  mlp: c_proj(gelu_tanh(c_fc(.)))
  head: logits = ln_f(x) . wte^T  (wte is embed.wte itself: "head.wte" is tied, no bias);
        loss = mean cross-entropy over all B*T positions
No dropout. Used by the correctness test (tests/integration/test_gpt_torch.py) and as a speed peer.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

LN_EPS = 1e-5  # GPT-2's, as kLnEps in gpt.cpp


@dataclass
class GPTConfig:
    """The plugin's "model" block, with the plugin's defaults."""
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    seq_len: int = 64
    vocab_size: int = 256
    init_std: float = 0.02


class Embed(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wte = nn.Parameter(torch.empty(c.vocab_size, c.n_embd))
        self.wpe = nn.Parameter(torch.empty(c.seq_len, c.n_embd))

    def forward(self, idx):
        return self.wte[idx] + self.wpe[: idx.shape[1]]


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head = c.n_head
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd)
        self.c_proj = nn.Linear(c.n_embd, c.n_embd)

    def forward(self, x):
        B, T, C = x.shape
        H = self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))  # [B, H, T, D]
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd)
        self.c_proj = nn.Linear(4 * c.n_embd, c.n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.n_embd, eps=LN_EPS)
        self.attn = Attention(c)
        self.ln_2 = nn.LayerNorm(c.n_embd, eps=LN_EPS)
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Head(nn.Module):
    def __init__(self, c, wte):
        super().__init__()
        self.ln_f = nn.LayerNorm(c.n_embd, eps=LN_EPS)
        self.wte = wte  # the embedding's Parameter: named_parameters() lists it once, as embed.wte

    def forward(self, x):
        return self.ln_f(x) @ self.wte.t()


class GPT(nn.Module):
    def __init__(self, config=None, **kw):
        super().__init__()
        c = config or GPTConfig(**kw)
        self.config = c
        self.embed = Embed(c)
        for i in range(c.n_layer):  # h0, h1, ...: the plugin's layer names, not a ModuleList's h.0
            setattr(self, f"h{i}", Block(c))
        self.head = Head(c, self.embed.wte)
        self.init_weights()

    def blocks(self):
        return [getattr(self, f"h{i}") for i in range(self.config.n_layer)]

    @torch.no_grad()
    def init_weights(self):
        """GPT-2's initialisation as the plugin declares it (same distributions, other random numbers)."""
        std = self.config.init_std
        proj_std = std / math.sqrt(2 * self.config.n_layer)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                p.normal_(0.0, proj_std)
            elif name.endswith(("wte", "wpe", ".weight")) and p.dim() == 2:
                p.normal_(0.0, std)
            elif "ln_" in name and name.endswith(".weight"):
                p.fill_(1.0)
            else:
                p.zero_()

    def forward(self, idx, targets=None):
        """idx: int64 [B, T], T <= seq_len. Returns the mean cross-entropy against targets [B, T],
        or the logits [B, T, vocab_size] when targets is None."""
        x = self.embed(idx)
        for block in self.blocks():
            x = block(x)
        logits = self.head(x)
        if targets is None:
            return logits
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
