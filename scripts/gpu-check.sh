#!/usr/bin/env bash
# For a machine with an NVIDIA GPU: builds dsrun with CUDA, then runs in one go what can only run there:
# the GPU-labelled tests (ctest -L gpu), `dsworker --selftest` on every visible GPU (kernels, GEMMs and
# NCCL), dsworker's training on the GPU against the CPU (tests/integration/test_device.py with
# DSWORKER_GPU_BIN), dsworker's training speed on GPT-2 124M (bench/gpu/dsworker_gpt2.sh) and, where python3
# has a CUDA torch, bench/gpu/run.py; and writes all of it, with the machine's
# description, to one file (default gpu-check-<host>-<UTC time>.txt; the
# self-test's JSON reports beside it). Exit status: 0 when everything passed, else 1.
#   scripts/gpu-check.sh [RESULTS_FILE]
#   scripts/gpu-check.sh --prebuilt DIR [RESULTS_FILE]
# Needs the CUDA toolkit under /usr/local/cuda (or nvcc on PATH) and the NVIDIA driver. On a GPU machine that
# cannot build (no Debian packages), --prebuilt DIR takes the binaries of a bundle made elsewhere by
# scripts/gpu-bundle.sh and unpacked in DIR, with its libraries, and the CUDA image's own cuBLASLt and NCCL
# (found under /usr/local/cuda and python's nvidia packages); it skips the build and ctest (the self-test is
# what ctest -L gpu runs).
set -uo pipefail
cd "$(dirname "$0")/.."
bin=build
prebuilt=""
if [ "${1:-}" = "--prebuilt" ]; then
  prebuilt="$(realpath "${2:?--prebuilt needs the directory the bundle was unpacked in}")"
  bin="$prebuilt/build"
  shift 2
  # the bundle's libraries, then the CUDA install's cuBLASLt and NCCL wherever they are (dlopen'ed by name)
  nvidia_libs=$(find / -xdev \( -name libnccl.so.2 -o -name libcublasLt.so.13 \) 2>/dev/null | xargs -r -n1 dirname |
                sort -u | tr '\n' ':')
  export LD_LIBRARY_PATH="$prebuilt/lib:${nvidia_libs}${LD_LIBRARY_PATH:-}"
fi
out="${1:-gpu-check-$(hostname)-$(date -u +%Y%m%dT%H%M%SZ).txt}"
status=0
log() { printf '%s\n' "$*" | tee -a "$out"; }
run() {  # run CMD...: its output into the results file; a failure is remembered
  log "\$ $*"
  "$@" 2>&1 | tee -a "$out"
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || { log "(exit status $rc)"; status=1; }
  return 0
}

: > "$out"
log "gpu-check: $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname), repo at $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
if ! command -v nvidia-smi >/dev/null; then
  log "gpu-check: nvidia-smi not found: this machine has no NVIDIA driver, so there is nothing here to check"
  exit 1
fi
run nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap --format=csv
run /usr/local/cuda/bin/nvcc --version

if [ -z "$prebuilt" ]; then
  [ -f build/CMakeCache.txt ] || run cmake --preset default
  run cmake --build --preset default -- -j"$(nproc)"
  [ -e build/kernels/cuda/CMakeFiles/ds_kernels_cuda.dir/launch.cu.o ] ||
    { log "gpu-check: this build has no CUDA kernels (cmake found no nvcc)"; status=1; }
  run ctest --test-dir build -L gpu --output-on-failure
else
  log "gpu-check: the binaries of the bundle in $prebuilt (LD_LIBRARY_PATH=$LD_LIBRARY_PATH)"
fi
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
for ((i = 0; i < gpus; i++)); do
  LOCAL_RANK=$i run "$bin/worker/dsworker" --selftest --selftest_json "${out%.txt}-selftest-gpu$i.json"
done
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  run python3 bench/gpu/run.py --ours "$bin/bench/gpu_bench" --json "${out%.txt}-bench-gpu.json"
else
  log "gpu-check: bench/gpu skipped: python3 has no CUDA torch (the benchmark's peer)"
fi
if python3 -c 'import pytest' 2>/dev/null; then  # dsworker's engine on the GPU against the CPU (fp32, fp16, bf16)
  run env DSRUN_BIN="$(realpath "$bin/cli/dsrun")" DSWORKER_BIN="$(realpath "$bin/worker/dsworker")" \
    DSWORKER_GPU_BIN="$(realpath "$bin/worker/dsworker")" python3 -m pytest -q -p no:cacheprovider \
    tests/integration/test_device.py
else
  log "gpu-check: tests/integration/test_device.py skipped: python3 has no pytest (apt-get install python3-pytest)"
fi
run bench/gpu/dsworker_gpt2.sh "$bin"  # dsworker's own training speed, GPT-2 124M on the first GPU
if [ "$gpus" -gt 1 ]; then  # and on every GPU: the gradients' sums and the partitions' gathers over NCCL
  run bench/gpu/dsworker_gpt2.sh "$bin" 10 "$gpus"
fi
log "gpu-check: $([ $status -eq 0 ] && echo 'everything passed' || echo 'something FAILED (see above)'); results in $out"
exit $status
