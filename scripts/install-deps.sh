#!/usr/bin/env bash
# Installs the Debian packages that dsrun's build, main job and benchmarks need; with --tests, also
# those only the tests need (PyTorch for the GPT reference: large, so the main job skips it).
# Idempotent: prints nothing and touches nothing when all packages are present.
# CUDA and NCCL are not installed here; the build finds them in /usr/local/cuda when present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git      # toolchain
  libcli11-dev libfmt-dev nlohmann-json3-dev libssh-dev  # launcher
  libyaml-cpp-dev libgloo-dev zlib1g-dev                 # runtime (ds_config YAML, Gloo, checkpoint CRC-32)
  liburing-dev                                           # ZeRO-Infinity: NVMe swap files through io_uring
  libcrcutil-dev                                         # dsworker: CRC-32C of TensorBoard event records
  libpcre2-dev                                           # BPE tokenizers: GPT-2's word pattern
  libopenblas-openmp-dev                                 # kernels: GEMM on the same OpenMP pool as our loops
  libdnnl-dev                                            # kernels: bf16 products on AMX / AVX-512-BF16 (oneDNN)
  ocl-icd-opencl-dev                                     # oneDNN's CMake config requires OpenCL (a recommends apt skips)
  libboost-context-dev                                   # kernels: the SIMT emulator's fiber switches
  doctest-dev                                            # the build configures the unit tests too
  python3 gnuplot-nox                                    # the loss-curve PNG (scripts/plot_loss.py)
  pdsh                                                   # --launcher pdsh, and a peer in bench/launch
)
if [ "${1:-}" = "--tests" ]; then
  packages+=(
    python3-pytest                                       # integration tests
    openssh-server openssh-client procps                 # throwaway sshd in the integration tests
    iproute2                                             # hosts in network namespaces (scripts/netns_hosts.py)
    openmpi-bin mpich                                    # --launcher openmpi / mpich with the real tools
    slurmctld slurmd slurm-client munge                  # a throwaway Slurm cluster (scripts/throwaway_slurm.py)
    python3-torch                                        # the GPT reference (tests/integration/torch_gpt.py)
    python3-venv                                         # scripts/test-venv.sh (tensorboard's reader, from PyPI)
  )
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
