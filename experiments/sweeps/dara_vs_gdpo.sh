#!/usr/bin/env bash
# Issue #20 item 3: DARA-Asym vs GDPO on SmolLM2-135M, 5 paired seeds x 40 steps (design, fixed before the runs:
# experiments/results/dara_vs_gdpo.preregistration.md). Resumable: run it again to continue; `--partial` reports the
# finished pairs. The slim record of each finished run goes to experiments/results/archive/dara_vs_gdpo (committed).
#   bash experiments/sweeps/dara_vs_gdpo.sh [--plan | --partial]
set -euo pipefail
cd "$(dirname "$0")/../.."
. .venv/bin/activate
exec python experiments/compare.py --name dara_vs_gdpo --seeds 1,2,3,4,5 \
  --method gdpo="--algo gdpo" --method dara-asym="--algo dara --dara_variant asym" \
  --train_args "--env arith --model_name_or_path .cache/models/SmolLM2-135M-Instruct --reward_funcs benchmarks.extra_rewards:graded_correctness,benchmarks.extra_rewards:ends_with_boxed --max_steps 40 --per_device_generation_batch_size 8 --num_generations 4 --max_answer_seq_len 48 --temperature 0.7 --actor_learning_rate 2e-5 --beta 0 --actor_zero_stage 0 --dtype fp32" \
  --metric first_step:reward/ends_with_boxed/mean:0.8:3 \
  --also eval:pass@1 --also mean_last:reward/graded_correctness/mean:5 \
  --eval_args "--env arith --limit 200 --max_new_tokens 48 --batch_size 100 --dtype fp32" \
  --archive experiments/results/archive/dara_vs_gdpo --results experiments/results/dara_vs_gdpo "$@"
