#!/usr/bin/env bash
# Issue #61 item 4: MAESTRO's Conductor vs equal vs random weights at --maestro_recipe paper, from the mixed warm
# start (where the boxed format, MAESTRO's `fmt`, is written by some but not all responses), 3 paired seeds x 40
# steps. Design fixed before any run: experiments/results/maestro_warm.preregistration.md.
#   bash experiments/sweeps/maestro_warm.sh [--plan | --partial]   # 9 runs
# The warm start is rebuilt first when missing (STEPS=5 bash scripts/warm_start.sh mixed: about a minute of SFT).
# Resumable: finished runs are cached and archived (packed); a killed run continues from its latest checkpoint.
set -euo pipefail
cd "$(dirname "$0")/../.."
. .venv/bin/activate
WARM=${WARM:-output/warm_start/mixed/sft/final}
[ -d "$WARM" ] || [ "${1:-}" = --plan ] || STEPS=5 bash scripts/warm_start.sh mixed
EVAL="--env mixed --limit 200 --max_new_tokens 48 --batch_size 100 --dtype fp32"
# The earlier MAESTRO sweeps' CPU recipe (experiments/sweeps/maestro_vs_baselines.sh) from the warm start, every arm
# under --maestro_recipe paper (its Conductor and the Table 7 settings credo records, docs/maestro.md).
TRAIN="--env mixed --model_name_or_path $WARM --max_steps 40 --per_device_generation_batch_size 8 --num_generations 4 --max_answer_seq_len 48 --temperature 0.7 --actor_learning_rate 2e-5 --beta 0 --actor_zero_stage 0 --dtype fp32 --maestro_recipe paper --save_steps 10"
exec python experiments/compare.py --name maestro_warm --seeds 1,2,3 --cache_dir output/compare/maestro_warm \
  --method equal="--algo maestro --maestro_weights equal" --method random="--algo maestro --maestro_weights random" \
  --method conductor="--algo maestro --maestro_weights conductor" \
  --train_args "$TRAIN" \
  --metric eval:pass@1 \
  --also eval:pass@1/arith --also eval:pass@1/describe --also mean_last:reward/fmt/mean:5 \
  --eval_args "$EVAL" \
  --archive experiments/results/archive/maestro_warm --results experiments/results/maestro_warm "$@"
