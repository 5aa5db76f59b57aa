"""Run with .venv-hf/bin/python (transformers over Debian's torch): the largest difference between the logits
of transformers' GPT2LMHeadModel loaded from HF_DIR and those of the PyTorch twin of our gpt plugin
(torch_gpt.py, checked against dsworker by test_gpt_torch.py) loaded from OURS (`dsckpt export`'s
safetensors, our parameter names), on a seeded batch of token ids, relative to the largest logit.
  hf_gpt2_logits.py HF_DIR OURS N_HEAD SEQ_LEN"""
import json, os, struct, sys

import torch
from transformers import GPT2LMHeadModel

sys.path.insert(0, os.path.dirname(__file__))
from torch_gpt import GPT, GPTConfig  # noqa: E402

hf_dir, ours, n_head, seq_len = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
data = open(ours, "rb").read()
(length,) = struct.unpack("<Q", data[:8])
header = json.loads(data[8:8 + length])
header.pop("__metadata__", None)
state = {}
for name, t in header.items():
    begin, end = t["data_offsets"]
    raw = data[8 + length + begin:8 + length + end]
    state[name] = torch.tensor(struct.unpack(f"<{len(raw) // 4}f", raw)).reshape(t["shape"])
vocab, n_embd = state["embed.wte"].shape
n_layer = sum(1 for name in state if name.endswith(".ln_1.weight"))
twin = GPT(GPTConfig(n_layer=n_layer, n_head=n_head, n_embd=n_embd, seq_len=seq_len, vocab_size=vocab))
missing, unexpected = twin.load_state_dict(state, strict=False)
assert not unexpected and all(name.startswith("head.") for name in missing), (missing, unexpected)
hf = GPT2LMHeadModel.from_pretrained(hf_dir).eval()
x = torch.randint(0, vocab, (4, seq_len), generator=torch.Generator().manual_seed(0))
with torch.no_grad():
    theirs, mine = hf(x).logits, twin(x)
print((theirs - mine).abs().max().item() / mine.abs().max().item())
