#!/usr/bin/env bash
# The README's main job: installs dependencies, builds, and trains a small GPT (configs/demo.json:
# 4 layers, 128 wide, byte-level) on the licence texts every Debian system has, on two ranks that
# dsrun starts on this machine (CPU, Gloo), ZeRO stage 2, bf16, 600 steps (about 3 minutes on 2
# cores). Rank 0 prints progress, validation losses and a generated sample; the metrics go to
# build/demo/metrics.jsonl and the loss curve to build/demo/loss.png. Extra arguments go to
# dsworker (e.g. --steps 100).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh >/dev/null
mkdir -p build/demo
DSRUN_LOCAL_SLOTS=2 build/cli/dsrun --num_gpus 2 build/worker/dsworker --model gpt --config configs/demo.json \
  --steps 600 --metrics build/demo/metrics.jsonl "$@"
scripts/plot_loss.py build/demo/metrics.jsonl build/demo/loss.png --title "dsrun demo: GPT on /usr/share/common-licenses"
echo "metrics: build/demo/metrics.jsonl, loss curve: build/demo/loss.png"
