#!/usr/bin/env bash
# Set up the peer for bench/zero/run.py (idempotent; not part of CI): DeepSpeed's own engine on a current
# PyTorch from PyPI, in <repo>/.venv-bench-torch (git-ignored; VENV=... to choose).
#
# What it installs:
#   - everything bench/gpt_cpu/setup.sh installs (PyPI's current torch in the venv, about 5.4 GB; Debian's torch for
#     the DDP peer);
#   - Debian's libaio-dev, so DeepSpeed's async_io op (ZeRO-Infinity's swap I/O) builds on first use;
#   - DeepSpeed from PyPI into the venv with DS_BUILD_OPS=0: its CPU ops (cpu_adam, async_io) are JIT-built by
#     torch's cpp_extension on first use (about a minute each, cached in ~/.cache/torch_extensions).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export VENV="${VENV:-$REPO/.venv-bench-torch}"
DEEPSPEED_SPEC="${DEEPSPEED_SPEC:-deepspeed}"   # e.g. DEEPSPEED_SPEC=deepspeed==0.19.8 to pin

"$REPO/bench/gpt_cpu/setup.sh"

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
if ! dpkg-query -W -f='${Status}' libaio-dev 2>/dev/null | grep -q "install ok installed"; then
    echo "setup.sh: apt-get install libaio-dev"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q libaio-dev
fi

if ! "$VENV/bin/python" -c 'import deepspeed' >/dev/null 2>&1; then
    echo "setup.sh: pip install $DEEPSPEED_SPEC into $VENV"
    DS_BUILD_OPS=0 "$VENV/bin/pip" install -q "$DEEPSPEED_SPEC"
fi

DS_ACCELERATOR=cpu "$VENV/bin/python" - <<'PY'
import torch, deepspeed
from deepspeed.ops.op_builder import AsyncIOBuilder
print(f"setup.sh: ok: torch {torch.__version__}, deepspeed {deepspeed.__version__}, "
      f"async_io {'buildable' if AsyncIOBuilder().is_compatible(verbose=False) else 'NOT buildable'}")
PY
