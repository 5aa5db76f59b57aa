#!/usr/bin/env bash
# The README's main job: installs dependencies, builds, and trains the tutorial MLP with dsworker
# on two ranks started by dsrun on this machine (CPU, Gloo), ZeRO stage 0, fp32, configs/mlp.json.
# Metrics go to build/demo/metrics.jsonl. Extra arguments are passed to dsworker (e.g. --epochs 20).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh >/dev/null
mkdir -p build/demo
DSRUN_LOCAL_SLOTS=2 build/cli/dsrun --num_gpus 2 build/worker/dsworker --model mlp --config configs/mlp.json \
  --epochs 10 --metrics build/demo/metrics.jsonl "$@"
echo "metrics: build/demo/metrics.jsonl"
