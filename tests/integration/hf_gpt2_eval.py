"""Run with .venv-hf/bin/python (transformers over Debian's torch; scripts/test-venv.sh): loads a
`dsckpt export --format hf` folder with transformers' GPT2LMHeadModel.from_pretrained and prints the
mean validation loss over the windows dsworker evaluates (the last val_fraction of TEXT_FILE's bytes,
seq_len + 1 windows, rank r of RANKS taking windows r, r+RANKS, ..., whole micro-batches).
  hf_gpt2_eval.py MODEL_DIR TEXT_FILE SEQ_LEN MICRO RANKS VAL_FRACTION"""
import sys

import torch
import torch.nn.functional as F
from transformers import GPT2LMHeadModel

model_dir, text_file = sys.argv[1], sys.argv[2]
seq_len, micro, ranks, val_fraction = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
model = GPT2LMHeadModel.from_pretrained(model_dir).eval()
data = open(text_file, "rb").read()
val = data[len(data) - round(len(data) * val_fraction):]
windows = [val[i * seq_len:i * seq_len + seq_len + 1] for i in range((len(val) - 1) // seq_len)]
per_rank = len(windows) // ranks // micro * micro
losses = []
with torch.no_grad():
    for rank in range(ranks):
        mine = windows[rank::ranks][:per_rank]
        for b in range(0, per_rank, micro):
            batch = torch.tensor([list(w) for w in mine[b:b + micro]])
            logits = model(batch[:, :-1]).logits
            losses.append(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1)).item())
print(sum(losses) / len(losses))
