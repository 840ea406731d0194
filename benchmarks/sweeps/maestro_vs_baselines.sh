#!/usr/bin/env bash
# Issue #19 item 8: MAESTRO's Conductor (small-run recipe) vs equal weights vs the paper's random weight vector on
# the task mix; 3 paired seeds x 40 steps (design, fixed before the runs:
# benchmarks/results/maestro_vs_baselines.preregistration.md). Resumable; `--partial` reports finished seeds.
#   bash benchmarks/sweeps/maestro_vs_baselines.sh base    # the base model's held-out accuracy, a reference point
#   bash benchmarks/sweeps/maestro_vs_baselines.sh [--plan | --partial]
set -euo pipefail
cd "$(dirname "$0")/../.."
. .venv/bin/activate
EVAL="--env mixed --limit 200 --max_new_tokens 48 --batch_size 100 --dtype fp32"
if [ "${1:-}" = base ]; then
  # shellcheck disable=SC2086
  exec python eval.py --model_name_or_path .cache/models/SmolLM2-135M-Instruct $EVAL \
    --output_dir benchmarks/results/archive/maestro_vs_baselines_base_model
fi
exec python benchmarks/compare.py --name maestro_vs_baselines --seeds 1,2,3 \
  --method equal="--algo maestro --maestro_weights equal" --method random="--algo maestro --maestro_weights random" \
  --method conductor="--algo maestro --maestro_weights conductor --maestro_recipe small" \
  --train_args "--env mixed --model_name_or_path .cache/models/SmolLM2-135M-Instruct --max_steps 40 --per_device_generation_batch_size 8 --num_generations 4 --max_answer_seq_len 48 --temperature 0.7 --actor_learning_rate 2e-5 --beta 0 --actor_zero_stage 0 --dtype fp32" \
  --metric eval:pass@1 \
  --also eval:pass@1/arith --also eval:pass@1/describe \
  --eval_args "$EVAL" \
  --archive benchmarks/results/archive/maestro_vs_baselines "$@"
