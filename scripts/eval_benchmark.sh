#!/usr/bin/env bash
# Evaluate a model on a math benchmark with paper-like settings (best-turn pass@8 over verify-and-refine turns).
#   MODEL=output/grpo_arith_smollm2/final bash scripts/eval_benchmark.sh math500
#   LIMIT=50 N=1 K=1 TEMPERATURE=0 MAX_TURNS=1 bash scripts/eval_benchmark.sh gsm8k     # quick greedy check
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH=${1:?usage: scripts/eval_benchmark.sh math500|gsm8k|aime2024|aime2025}
case "$BENCH" in
  math500|gsm8k|aime2024|aime2025) DATA="data/$BENCH/test.jsonl" ;;
  *) echo "unknown benchmark $BENCH (math500, gsm8k, aime2024, aime2025)" >&2; exit 2 ;;
esac
bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
MODEL=${MODEL:-.cache/models/SmolLM2-135M-Instruct}
# One folder per model and benchmark, so that evaluating a second model never overwrites the first one's results.
MODEL_TAG=$(printf '%s' "$MODEL" | sed -e 's|/*$||' -e 's|^[./]*||' -e 's|[^A-Za-z0-9._-]|_|g')
OUTPUT=${OUTPUT:-output/eval/$BENCH/$MODEL_TAG}
LIMIT=${LIMIT:-100000}
N=${N:-8}
K=${K:-1,4,8}
MAX_TURNS=${MAX_TURNS:-3}
TEMPERATURE=${TEMPERATURE:-0.6}
TOP_P=${TOP_P:-0.95}
MAX_NEW_TOKENS=${MAX_NEW_TOKENS:-1024}
DTYPE=${DTYPE:-auto}  # eval.py: train.py's rule (bf16 on CUDA and where the CPU's bf16 matmul measured faster)
set -x
python eval.py --model_name_or_path "$MODEL" --env math --data_path "$DATA" --limit "$LIMIT" --n "$N" --k "$K" \
    --max_turns "$MAX_TURNS" --temperature "$TEMPERATURE" --top_p "$TOP_P" --max_new_tokens "$MAX_NEW_TOKENS" \
    --dtype "$DTYPE" --output_dir "$OUTPUT" "${@:2}"
