#!/usr/bin/env bash
# GPU smoke check of the rollout backends: 2 GRPO steps each on SmolLM2-135M-Instruct in bf16 (arith env, ZeRO-3,
# one GPU) with
#   hf                HF generate on the gathered actor,
#   vllm              the colocated vLLM engine (--rollout_backend vllm, TIS on),
#   hf+hybrid_engine  (only when asked for in BACKENDS) --enable_hybrid_engine: SmolLM2 is a Llama, which
#                     rl/engine/actor.py refuses under transformers 5.x, so this shows the warning and the HF fallback.
# printing generated tokens/s per backend and, for vLLM, the max |logp_vllm - logp_trainer| over the sampled tokens.
# Writes benchmarks/results/gpu_check.json (and the runs' logs under $OUT).
#
#   bash scripts/gpu_check.sh                      # setup (WITH_VLLM=1) first, then the three runs
#   SKIP_SETUP=1 bash scripts/gpu_check.sh         # an environment that is already installed (offline machines)
#   BACKENDS="hf vllm" STEPS=2 bash scripts/gpu_check.sh
#
# Status: written without a GPU and not yet run (README, "GPU").
set -euo pipefail
cd "$(dirname "$0")/.."

if ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }; then
  echo "gpu_check: no CUDA GPU visible; nothing to check" >&2
  exit 1
fi
if [ "${SKIP_SETUP:-0}" != 1 ]; then
  WITH_VLLM=${WITH_VLLM:-1} bash scripts/setup.sh
fi
PYTHON=${PYTHON:-.venv/bin/python}
DEEPSPEED=${DEEPSPEED:-$(dirname "$PYTHON")/deepspeed}
MODEL=${MODEL:-.cache/models/SmolLM2-135M-Instruct}
OUT=${OUT:-output/gpu_check}
STEPS=${STEPS:-2}
BACKENDS=${BACKENDS:-"hf vllm"}
RESULT=${RESULT:-benchmarks/results/gpu_check.json}
mkdir -p "$OUT" "$(dirname "$RESULT")"

common=(--algo grpo --env arith --model_name_or_path "$MODEL" --dtype bf16 --actor_zero_stage 3
        --per_device_generation_batch_size 16 --num_generations 8 --max_answer_seq_len 128 --temperature 1.0
        --max_steps "$STEPS" --beta 0 --seed 1234 --resume none --no_final_export)
status=()
for backend in $BACKENDS; do
  case "$backend" in
    hf) extra=(--rollout_backend hf) ;;
    hf+hybrid_engine) extra=(--rollout_backend hf --enable_hybrid_engine) ;;
    vllm) extra=(--rollout_backend vllm --vllm_gpu_memory_utilization 0.3 --vllm_is_correction tis) ;;
    *) echo "gpu_check: unknown backend $backend" >&2; exit 2 ;;
  esac
  dir="$OUT/$backend"
  rm -rf "$dir"; mkdir -p "$dir"
  echo "== $backend"
  if "$DEEPSPEED" --num_gpus 1 --master_port "${PORT:-29511}" train.py "${common[@]}" "${extra[@]}" \
       --output_dir "$dir" > "$dir/run.log" 2>&1; then
    status+=("$backend=ok")
  else
    status+=("$backend=failed")
    tail -n 20 "$dir/run.log" >&2
  fi
done

"$PYTHON" - "$OUT" "$RESULT" "${status[@]}" <<'EOF'
"""Summarise the runs' metrics.jsonl into one JSON record and a table."""
import datetime, importlib, json, os, subprocess, sys

out, result, statuses = sys.argv[1], sys.argv[2], dict(s.split("=", 1) for s in sys.argv[3:])
def version(name):
    try:
        return importlib.import_module(name).__version__
    except Exception:
        return None
gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"], capture_output=True,
                     text=True).stdout.strip().splitlines()
record = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "gpu": gpu,
          "versions": {n: version(n) for n in ("torch", "deepspeed", "transformers", "vllm")},
          "recipe": "GRPO, arith, SmolLM2-135M-Instruct bf16, ZeRO-3, 1 GPU, 16 prompts x 8 samples, 128 new tokens",
          "backends": {}}
keys = ("throughput/generated_tokens_per_s", "time/generate", "time/gather", "time/train", "time/step",
        "rollout/logp_diff_max", "rollout/logp_diff_mean", "rollout/is_truncated_frac")
for backend, state in statuses.items():
    path = os.path.join(out, backend, "metrics.jsonl")
    steps = [json.loads(line) for line in open(path)] if os.path.exists(path) else []
    record["backends"][backend] = {"status": state, "steps": [{k: s.get(k) for k in keys if k in s} for s in steps]}
json.dump(record, open(result, "w"), indent=1)
print(f"\n| backend | status | generated tokens/s (per step) | max abs logp_vllm - logp_trainer |")
print("|---|---|---|---|")
for backend, r in record["backends"].items():
    tps = ", ".join(f"{s.get('throughput/generated_tokens_per_s', float('nan')):.0f}" for s in r["steps"]) or "-"
    diff = ", ".join(f"{s['rollout/logp_diff_max']:.4f}" for s in r["steps"] if "rollout/logp_diff_max" in s) or "-"
    print(f"| {backend} | {r['status']} | {tps} | {diff} |")
print(f"\nwritten: {result}")
EOF
