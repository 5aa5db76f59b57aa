#!/usr/bin/env bash
# The Python packages some tests need that Debian does not ship, from PyPI into .venv-tests/ and
# .venv-hf/ (outside the product: dsrun and dsworker never use them). Idempotent: does nothing when
# the venvs are ready.
#   tensorboard: its own event reader checks the event files dsworker writes;
#   tokenizers: its byte-level BPE ids are the reference for runtime/data/bpe_tokenizer;
#   transformers (in .venv-hf, over Debian's python3-torch, hence a version that supports torch 1.13):
#   loads `dsckpt export --format hf` folders.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-tests
requirements=(tensorboard==2.21.0 tokenizers==0.23.3)
if ! { [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import tensorboard, tokenizers" 2>/dev/null; }; then
  echo "test-venv: installing ${requirements[*]} into $venv"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "${requirements[@]}"
fi
hf=.venv-hf
if ! { [ -x "$hf/bin/python" ] && "$hf/bin/python" -c "import transformers, torch" 2>/dev/null; }; then
  echo "test-venv: installing transformers==4.46.3 into $hf (with Debian's torch)"
  /usr/bin/python3 -m venv --system-site-packages "$hf"
  "$hf/bin/pip" install -q --disable-pip-version-check transformers==4.46.3
fi
