#!/usr/bin/env bash
# The Python packages some tests need that Debian does not ship, from PyPI into .venv-tests/ (outside
# the product: dsrun and dsworker never use them). Idempotent: does nothing when the venv is ready.
#   tensorboard: its own event reader checks the event files dsworker writes;
#   tokenizers: its byte-level BPE ids are the reference for runtime/data/bpe_tokenizer.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-tests
requirements=(tensorboard==2.21.0 tokenizers==0.23.3)
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import tensorboard, tokenizers" 2>/dev/null; then exit 0; fi
echo "test-venv: installing ${requirements[*]} into $venv"
/usr/bin/python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check "${requirements[@]}"
