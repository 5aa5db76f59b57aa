#!/usr/bin/env bash
# dsworker's own training of GPT-2 124M (12 layers of 768, 12 heads, context 1024, vocabulary 50257,
# micro-batch 8, AdamW) on one GPU through dsrun, in the configs docs/benchmarks.md tabulates: bf16 at ZeRO 1,
# 2 and 3 (each layer gathered on the GPU), fp16 (dynamic loss scale) and fp32 at ZeRO 1 with the optimizer on the
# GPU, bf16 at ZeRO 1 with the fused attention kernel (DS_CUDA_ATTENTION=fused), and bf16 at ZeRO 1 with
# offload_optimizer (AdamW on the CPU). Prints each run's summary (steps, loss, tokens/s) and its step's phases
# (wall_clock_breakdown) and memory (the host's and the GPU's); exit status 1 when a run fails.
# scripts/gpu-check.sh runs it, and again on every GPU where there are several (NCCL sums the gradients; at
# ZeRO 2 each GPU keeps its partition's, at ZeRO 3 its partition of the parameters too).
#   bench/gpu/dsworker_gpt2.sh BUILD_DIR [STEPS] [GPUS]  (BUILD_DIR holds cli/dsrun and worker/dsworker; GPUS: 1)
# DS_ACCELERATOR=cpu runs the same configs on the CPU (slowly: a check of the script itself).
set -uo pipefail
if [ $# -lt 1 ] || [ ! -x "$1/cli/dsrun" ] || [ ! -x "$1/worker/dsworker" ]; then
  echo "usage: bench/gpu/dsworker_gpt2.sh BUILD_DIR [STEPS] [GPUS]  (BUILD_DIR with cli/dsrun and worker/dsworker)" >&2
  exit 1
fi
build="$(realpath "$1")"
steps="${2:-10}"
gpus="${3:-1}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
data=/usr/share/common-licenses/GPL-3  # the text of the recorded runs; elsewhere this repository's docs
if [ ! -r "$data" ]; then
  data="$work/text.txt"
  cat "$(dirname "$0")"/../../docs/*.md > "$data"
fi
status=0
# name, the config's keys beside the model, batch, optimizer and data every run shares, and (optional) the attention
# kernel (DS_CUDA_ATTENTION)
while IFS='|' read -r name keys attention; do
  cat > "$work/config.json" <<EOF
{"train_micro_batch_size_per_gpu": 8, "optimizer": {"type": "AdamW", "params": {"lr": 0.0003}},
 "wall_clock_breakdown": true, "steps_per_print": $steps,
 "model": {"n_layer": 12, "n_head": 12, "n_embd": 768, "seq_len": 1024, "vocab_size": 50257},
 "data": {"path": "$data", "val_fraction": 0}, $keys}
EOF
  echo "== dsworker GPT-2 124M, $name, $steps steps on $gpus GPU(s)"
  if ! env ${attention:+DS_CUDA_ATTENTION="$attention"} DS_ACCELERATOR="${DS_ACCELERATOR:-cuda}" "$build/cli/dsrun" --num_gpus "$gpus" "$build/worker/dsworker" --model gpt \
       --config "$work/config.json" --steps "$steps" < /dev/null > "$work/out.txt" 2>&1; then
    status=1
    tail -n 20 "$work/out.txt"
    continue
  fi
  grep -E 'dsworker: device:' "$work/out.txt" | head -n 2
  grep -E 'time \(ms\)' "$work/out.txt" | tail -n 2  # the last steps' phases
  grep -E '(done:|memory per rank)' "$work/out.txt"
done <<'RUNS'
ZeRO 1, bf16, optimizer on the GPU|"bf16": {"enabled": true}, "zero_optimization": {"stage": 1}
ZeRO 1, bf16, optimizer on the GPU, fused attention|"bf16": {"enabled": true}, "zero_optimization": {"stage": 1}|fused
ZeRO 2, bf16, optimizer on the GPU|"bf16": {"enabled": true}, "zero_optimization": {"stage": 2}
ZeRO 3, bf16, parameters gathered on the GPU|"bf16": {"enabled": true}, "zero_optimization": {"stage": 3}
ZeRO 1, fp16, optimizer on the GPU|"fp16": {"enabled": true}, "zero_optimization": {"stage": 1}
ZeRO 1, fp32, optimizer on the GPU|"zero_optimization": {"stage": 1}
ZeRO 1, bf16, offload_optimizer (CPU)|"bf16": {"enabled": true}, "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}}
RUNS
exit $status
