#!/usr/bin/env bash
# One node, NUM_GPUS GPUs (default 8): ZeRO-3 across them, bf16, one colocated vLLM engine per GPU
# (VLLM_TP=2 shares one engine between two GPUs; single-turn methods only).
#   bash scripts/gpu/single_node.sh gdpo qwen3-4b
#   NUM_GPUS=4 DRY_RUN=1 bash scripts/gpu/single_node.sh tcpo r1-distill-llama-8b
# Settings and their sources: scripts/gpu/common.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/gpu/common.sh
[ $# -ge 2 ] || { credo_usage; exit 2; }
METHOD=$1 MODEL=$2; shift 2
credo_configure single_node "$METHOD" "$MODEL" || exit $?
credo_launch --num_gpus "${NUM_GPUS:-8}" --master_port "${PORT:-29500}" -- "$@"
