#!/usr/bin/env bash
# One GPU: ZeRO-3 with ZeRO-Offload of parameters and optimizer state to CPU, bf16, vLLM colocated on the same GPU.
#   bash scripts/gpu/single_gpu.sh grpo qwen3-4b
#   DRY_RUN=1 bash scripts/gpu/single_gpu.sh dara r1-distill-llama-8b --max_steps 10
# Settings and their sources: scripts/gpu/common.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/gpu/common.sh
[ $# -ge 2 ] || { credo_usage; exit 2; }
METHOD=$1 MODEL=$2; shift 2
credo_configure single_gpu "$METHOD" "$MODEL" || exit $?
credo_launch --num_gpus 1 --master_port "${PORT:-29500}" -- "$@"
