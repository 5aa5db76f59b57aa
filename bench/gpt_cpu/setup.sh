#!/usr/bin/env bash
# Set up the peers for bench/gpt_cpu/run.py (idempotent; not part of CI).
#
#   bench/gpt_cpu/setup.sh                      # current PyTorch from PyPI into <repo>/.venv-bench-torch (git-ignored)
#   VENV=/some/dir TORCH_SPEC=torch==2.x.y bench/gpt_cpu/setup.sh
#
# What it installs:
#   - Debian: python3-venv, python3-torch (torch 1.13, the second reference, run by /usr/bin/python3),
#     libopenblas-dev (cblas.h for the sgemm peak probe that run.py compiles), g++.
#   - A venv made by Debian's /usr/bin/python3 WITHOUT system site packages (so `import torch` there is PyPI's
#     torch, never Debian's), with a current torch from PyPI and its dependencies, plus numpy (torch warns without
#     it). PyPI's Linux x86_64 torch wheel is the CUDA build, and the CUDA-only wheels cannot be left out: its
#     libtorch_cuda.so / libtorch_python.so are linked against libcudart, libcublas, libcudnn, libcufile, libnccl,
#     ..., so with `pip install --no-deps torch` the import fails ("libcufile.so.0: cannot open shared object
#     file"), although a CPU-only run never calls into them. The CPU-only wheels are not on PyPI. About 5.4 GB in the
#     venv (about a minute to install here).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${VENV:-$REPO/.venv-bench-torch}"
TORCH_SPEC="${TORCH_SPEC:-torch}"   # e.g. TORCH_SPEC=torch==2.9.0 to pin

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

need_apt=()
for pkg in python3-venv python3-torch libopenblas-dev g++; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need_apt+=("$pkg")
done
if [ "${#need_apt[@]}" -gt 0 ]; then
    echo "setup.sh: apt-get install ${need_apt[*]}"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${need_apt[@]}"
fi

if [ ! -x "$VENV/bin/python" ]; then
    echo "setup.sh: creating $VENV"
    /usr/bin/python3 -m venv "$VENV"
fi

if ! "$VENV/bin/python" -c 'import torch' >/dev/null 2>&1; then
    echo "setup.sh: pip install $TORCH_SPEC into $VENV (with its CUDA library wheels: about 5.4 GB)"
    "$VENV/bin/pip" install -q --upgrade pip setuptools
    "$VENV/bin/pip" install -q "$TORCH_SPEC" numpy
fi

"$VENV/bin/python" - <<'EOF'
import torch
x = torch.randn(64, 64, requires_grad=True)
(x @ x).sum().backward()
print(f"setup.sh: ok: {torch.__file__.rsplit('/', 2)[0]}: torch {torch.__version__}, "
      f"{torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, 'cpu') else '?'}")
EOF
/usr/bin/python3 -c 'import torch; print(f"setup.sh: ok: /usr/bin/python3: Debian torch {torch.__version__}")'
