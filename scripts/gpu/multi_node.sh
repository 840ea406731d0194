#!/usr/bin/env bash
# Several nodes listed in a DeepSpeed hostfile ("hostname slots=8" per line), ZeRO-3 across all GPUs, bf16,
# one colocated vLLM engine per GPU. Three ways to start it (all end in the same per-node command, DeepSpeed's
# `deepspeed.launcher.launch --node_rank K`, which starts that node's ranks and meets the others at MASTER_ADDR:PORT):
#
#   From the first host, which starts every node over passwordless ssh (DeepSpeed's pdsh runner):
#     HOSTFILE=hostfile bash scripts/gpu/multi_node.sh grpo r1-distill-llama-8b
#     HOSTFILE=hostfile NUM_NODES=2 DRY_RUN=1 bash scripts/gpu/multi_node.sh maestro qwen3-4b
#   On every node, without ssh (SLURM, Kubernetes: one launcher agent per node; `deepspeed --no_ssh`). MASTER_ADDR
#   is the address of node rank 0 (the hostfile's first line), reachable from every node; each node logs to
#   OUTPUT/training.node<K>.log. OUTPUT must be on a filesystem every node shares (checkpoints are written there
#   by every rank):
#     NODE_RANK=$SLURM_NODEID MASTER_ADDR=node-a HOSTFILE=hostfile bash scripts/gpu/multi_node.sh grpo qwen3-4b
#   --cpu_dry_run: every node on this machine, each started exactly as the line above starts it, meeting at
#   127.0.0.1 (gloo on CPU; DeepSpeed's shared-memory allreduce is off, as across real nodes). NUM_NODES (2) x
#   GPUS_PER_NODE (1) ranks, or HOSTFILE's layout when HOSTFILE is set (its names are labels only). CPU-sized
#   defaults, each overridable: ROLLOUT_BACKEND=hf DTYPE=fp32 MAX_STEPS=2 MAX_ANSWER=32 PROMPTS_PER_RANK=2
#   NUM_GENERATIONS=4 OUTPUT=output/<method>_<model>_multi_node_cpu, MODEL_PATH the CPU default model
#   (.cache/models/SmolLM2-135M-Instruct). If a node fails, the others are stopped.
#     bash scripts/gpu/multi_node.sh --cpu_dry_run grpo qwen3-4b --max_steps 1
#   tests/run/test_multi_node.py runs it on a tiny model and checks its metrics against one node of two ranks.
# Settings and their sources: scripts/gpu/common.sh.
set -euo pipefail
SCRIPT="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$0")/../.."
. scripts/gpu/common.sh

# cpu_dry_run METHOD MODEL [extra train.py flags]: this script once per node, as NODE_RANK=K, in the background.
cpu_dry_run() {
  local method=$1 model=$2; shift 2
  export ROLLOUT_BACKEND=${ROLLOUT_BACKEND:-hf} DTYPE=${DTYPE:-fp32} MAX_STEPS=${MAX_STEPS:-2}
  export MAX_ANSWER=${MAX_ANSWER:-32} PROMPTS_PER_RANK=${PROMPTS_PER_RANK:-2} NUM_GENERATIONS=${NUM_GENERATIONS:-4}
  export OUTPUT=${OUTPUT:-output/${method}_${model}_multi_node_cpu} MASTER_ADDR=127.0.0.1 PORT=${PORT:-29500}
  if [ -z "${MODEL_PATH:-}" ]; then
    MODEL_PATH=.cache/models/SmolLM2-135M-Instruct
    if [ ! -d "$MODEL_PATH" ]; then
      echo "multi_node --cpu_dry_run: set MODEL_PATH= to a small local model ($MODEL_PATH, the CPU default, is" \
           "not there: bash scripts/setup.sh converts it)" >&2
      return 2
    fi
  fi
  export MODEL_PATH
  local hostfile nodes ranks
  if [ -n "${HOSTFILE:-}" ]; then
    hostfile=$HOSTFILE
    [ -f "$hostfile" ] || { echo "multi_node --cpu_dry_run: hostfile '$hostfile' not found" >&2; return 2; }
    nodes=${NUM_NODES:-$(grep -cE '^[^#[:space:]]' "$hostfile")}
  else
    nodes=${NUM_NODES:-2}
    hostfile=$(mktemp)
    TMP_HOSTFILE=$hostfile  # removed on exit (see the traps below)
    for ((k = 0; k < nodes; k++)); do echo "node-$k slots=${GPUS_PER_NODE:-1}"; done > "$hostfile"
  fi
  ranks=$(grep -E '^[^#[:space:]]' "$hostfile" | head -n "$nodes" |
          awk -v cap="${GPUS_PER_NODE:-0}" '{ n = 1; if (match($0, /slots=[0-9]+/)) n = substr($0, RSTART + 6);
                                              n += 0; if (cap > 0 && n > cap) n = cap; total += n }
                                            END { print total + 0 }')
  [ "${ranks:-0}" -gt 0 ] || { echo "multi_node --cpu_dry_run: $hostfile lists no node" >&2; return 2; }
  # All nodes share this machine's cores; each rank would otherwise take cores / its node's ranks (rl/engine/actor.py).
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( $(nproc) / ranks > 0 ? $(nproc) / ranks : 1 ))}
  local pids=() k
  for ((k = 0; k < nodes; k++)); do
    if [ "${DRY_RUN:-0}" = 1 ]; then
      NODE_RANK=$k HOSTFILE=$hostfile NUM_NODES=$nodes bash "$SCRIPT" "$method" "$model" "$@"
    else
      # its own process group per node, so that a failed node's partners can be stopped with all their ranks
      NODE_RANK=$k HOSTFILE=$hostfile NUM_NODES=$nodes setsid bash "$SCRIPT" "$method" "$model" "$@" &
      pids+=("$!")
    fi
  done
  NODE_GROUPS="${pids[*]+${pids[*]}}"  # stopped by the EXIT trap while they run
  local status running pid
  while [ ${#pids[@]} -gt 0 ]; do
    running=()
    for pid in "${pids[@]}"; do
      if kill -0 "$pid" 2>/dev/null; then running+=("$pid"); continue; fi
      wait "$pid" || {
        status=$?
        echo "multi_node --cpu_dry_run: a node exited with status $status; stopping the others" \
             "(logs: $OUTPUT/training.node*.log)" >&2
        return "$status"
      }
    done
    pids=("${running[@]+"${running[@]}"}")
    NODE_GROUPS="${pids[*]+${pids[*]}}"
    [ ${#pids[@]} -eq 0 ] || sleep 1
  done
}

# A dry run that ends (a failed node, Ctrl-C, a kill) takes every node's process group with it.
TMP_HOSTFILE="" NODE_GROUPS=""
stop_nodes() {
  local pid
  for pid in $NODE_GROUPS; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  [ -z "$TMP_HOSTFILE" ] || rm -f "$TMP_HOSTFILE"
}

CPU_DRY_RUN=0
if [ "${1:-}" = --cpu_dry_run ]; then CPU_DRY_RUN=1; shift; fi
[ $# -ge 2 ] || { credo_usage; echo "  --cpu_dry_run (first) runs every node on this machine's CPU" >&2; exit 2; }
METHOD=$1 MODEL=$2; shift 2
if [ "$CPU_DRY_RUN" = 1 ]; then
  (credo_configure multi_node "$METHOD" "$MODEL") || exit $?  # refuse a bad METHOD/MODEL once, not once per node
  trap stop_nodes EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  cpu_dry_run "$METHOD" "$MODEL" "$@"
  exit $?
fi

HOSTFILE=${HOSTFILE:-hostfile}
if [ ! -f "$HOSTFILE" ]; then
  echo "multi_node: hostfile '$HOSTFILE' not found (set HOSTFILE=; one 'hostname slots=N' line per node)" >&2
  exit 2
fi
NUM_NODES=${NUM_NODES:-$(grep -cE '^[^#[:space:]]' "$HOSTFILE")}
credo_configure multi_node "$METHOD" "$MODEL" || exit $?
launcher=(--hostfile "$HOSTFILE" --num_nodes "$NUM_NODES" --master_port "${PORT:-29500}")
if [ -n "${NODE_RANK:-}" ]; then
  if ! [[ "$NODE_RANK" =~ ^[0-9]+$ ]] || [ "$NODE_RANK" -ge "$NUM_NODES" ]; then
    echo "multi_node: NODE_RANK=$NODE_RANK is not a node of $HOSTFILE (0 to $((NUM_NODES - 1)))" >&2
    exit 2
  fi
  if [ -z "${MASTER_ADDR:-}" ]; then
    echo "multi_node: NODE_RANK=$NODE_RANK needs MASTER_ADDR= (the address of node rank 0, reachable from" \
         "every node)" >&2
    exit 2
  fi
  launcher+=(--no_ssh --node_rank "$NODE_RANK")
  TRAINING_LOG=training.node$NODE_RANK.log
  # deepspeed exits 0 when this node's launch process is killed (its runner drops negative exit codes) while the
  # ranks stop by themselves: scripts/launch.py makes that a failed node (exit 1) and forwards a Ctrl-C to the ranks
  CREDO_LAUNCHER="python scripts/launch.py"
fi
if [ -n "${MASTER_ADDR:-}" ]; then launcher+=(--master_addr "$MASTER_ADDR"); fi
if [ -n "${GPUS_PER_NODE:-}" ]; then launcher+=(--num_gpus "$GPUS_PER_NODE"); fi
credo_launch "${launcher[@]}" -- "$@"
