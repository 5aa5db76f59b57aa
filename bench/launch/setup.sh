#!/usr/bin/env bash
# Set up the peers for bench/launch/run.py (idempotent; not part of CI).
#
#   bench/launch/setup.sh            # installs into <repo>/.venv-bench (git-ignored)
#   VENV=/some/dir bench/launch/setup.sh
#
# What it installs:
#   - Debian: pdsh, openssh-server/-client (the loopback "hosts"), openmpi-bin and mpich (the MPI launchers),
#     iproute2 (--netns hosts), python3-venv, and python3-torch
#     (Debian's CPU build of torch; PyPI's torch wheel is several GB of CUDA libraries, and DeepSpeed's
#     launcher only needs `import torch` to work).
#   - A venv made by Debian's /usr/bin/python3 with --system-site-packages (so it sees python3-torch),
#     with DeepSpeed from PyPI installed into it without building any C++/CUDA op (DS_BUILD_OPS=0).
# dsrun itself is not built here: run.py uses build/cli/dsrun (scripts/build.sh builds it).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${VENV:-$REPO/.venv-bench}"
DEEPSPEED_SPEC="${DEEPSPEED_SPEC:-deepspeed}"   # e.g. DEEPSPEED_SPEC=deepspeed==0.19.8 to pin

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

need_apt=()
for pkg in pdsh openssh-server openssh-client openmpi-bin mpich iproute2 python3-venv python3-torch; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need_apt+=("$pkg")
done
if [ "${#need_apt[@]}" -gt 0 ]; then
    echo "setup.sh: apt-get install ${need_apt[*]}"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${need_apt[@]}"
fi

if [ ! -x "$VENV/bin/python" ]; then
    echo "setup.sh: creating $VENV"
    /usr/bin/python3 -m venv --system-site-packages "$VENV"
fi

if ! "$VENV/bin/python" -c 'import deepspeed.launcher.runner' >/dev/null 2>&1; then
    echo "setup.sh: pip install $DEEPSPEED_SPEC into $VENV (without torch)"
    # DeepSpeed's metadata asks for torch>=2.0.0 and Debian bookworm ships 1.13, so a plain `pip install deepspeed`
    # would pull PyPI's CUDA torch (about 5 GB with its nvidia-* wheels). The launcher (runner.py, launch.py) runs
    # fine on Debian's torch 1.13, so install DeepSpeed with --no-deps and its other requirements by hand.
    # DS_BUILD_OPS=0: build no C++/CUDA op; --no-build-isolation: setup.py may import the installed torch.
    DS_BUILD_OPS=0 "$VENV/bin/pip" install -q --no-deps --no-build-isolation "$DEEPSPEED_SPEC"
    "$VENV/bin/pip" install -q einops hjson msgpack ninja numpy 'packaging>=20.0' psutil py-cpuinfo \
        'pydantic>=2.0.0' tqdm
fi

"$VENV/bin/python" - <<'EOF'
import torch, deepspeed
print(f"setup.sh: ok: torch {torch.__version__}, deepspeed {deepspeed.__version__}")
EOF
echo "setup.sh: deepspeed launcher: $VENV/bin/deepspeed"
