#!/usr/bin/env bash
# Several nodes listed in a DeepSpeed hostfile ("hostname slots=8" per line), ZeRO-3 across all GPUs, bf16,
# one colocated vLLM engine per GPU. Run it on the first host of the hostfile (passwordless ssh to the others).
#   HOSTFILE=hostfile bash scripts/gpu/multi_node.sh grpo r1-distill-llama-8b
#   HOSTFILE=hostfile NUM_NODES=2 DRY_RUN=1 bash scripts/gpu/multi_node.sh maestro qwen3-4b
# Settings and their sources: scripts/gpu/common.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/gpu/common.sh
[ $# -ge 2 ] || { credo_usage; exit 2; }
METHOD=$1 MODEL=$2; shift 2
HOSTFILE=${HOSTFILE:-hostfile}
if [ ! -f "$HOSTFILE" ]; then
  echo "multi_node: hostfile '$HOSTFILE' not found (set HOSTFILE=; one 'hostname slots=N' line per node)" >&2
  exit 2
fi
NUM_NODES=${NUM_NODES:-$(grep -cE '^[^#[:space:]]' "$HOSTFILE")}
credo_configure multi_node "$METHOD" "$MODEL" || exit $?
launcher=(--hostfile "$HOSTFILE" --num_nodes "$NUM_NODES" --master_port "${PORT:-29500}")
if [ -n "${MASTER_ADDR:-}" ]; then launcher+=(--master_addr "$MASTER_ADDR"); fi
if [ -n "${GPUS_PER_NODE:-}" ]; then launcher+=(--num_gpus "$GPUS_PER_NODE"); fi
credo_launch "${launcher[@]}" -- "$@"
