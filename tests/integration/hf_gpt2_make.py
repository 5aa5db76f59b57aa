"""Run with .venv-hf/bin/python: writes a randomly initialised transformers GPT-2 (seeded) with
save_pretrained (config.json + model.safetensors), the way a user's Hugging Face model arrives.
  hf_gpt2_make.py OUT_DIR N_LAYER N_HEAD N_EMBD N_POSITIONS VOCAB"""
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel

out, n_layer, n_head, n_embd, n_positions, vocab = sys.argv[1], *map(int, sys.argv[2:7])
torch.manual_seed(0)
config = GPT2Config(n_layer=n_layer, n_head=n_head, n_embd=n_embd, n_positions=n_positions, vocab_size=vocab,
                    activation_function="gelu_new", initializer_range=0.1)
GPT2LMHeadModel(config).save_pretrained(out, safe_serialization=True)
