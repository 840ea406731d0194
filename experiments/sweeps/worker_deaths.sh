#!/usr/bin/env bash
# Issue #51 item 3: does retrying a reward call whose worker died keep training where a clean run goes, where scoring
# those calls 0 would not? 3 arms x 3 paired seeds x 12 steps of the main job's recipe on arith (design, fixed before
# the runs: experiments/results/worker_deaths.preregistration.md). The reward is arith correctness computed in a reward
# worker (experiments/dying_reward.py); in two arms that worker SIGKILLs itself on 30% of its calls. Resumable: run it
# again to continue; `--partial` reports the finished seeds. Slim records: experiments/results/archive/worker_deaths.
#   bash experiments/sweeps/worker_deaths.sh [--plan | --partial]
set -euo pipefail
cd "$(dirname "$0")/../.."
. .venv/bin/activate
exec python experiments/compare.py --name worker_deaths --seeds 1,2,3 \
  --method clean="--reward_funcs experiments.dying_reward:arith_correct" \
  --method dying-retry="--reward_funcs experiments.dying_reward:arith_correct_dying --reward_retries 1" \
  --method dying-scored-0="--reward_funcs experiments.dying_reward:arith_correct_dying --reward_retries 0" \
  --train_args "--algo grpo --env arith --model_name_or_path .cache/models/SmolLM2-135M-Instruct --max_steps 12 --per_device_generation_batch_size 8 --num_generations 4 --max_answer_seq_len 32 --temperature 0.7 --actor_learning_rate 2e-5 --beta 0 --dtype bf16 --max_reward_error_rate 1 --save_steps 2" \
  --metric eval:pass@1 --also mean_last:success_rate:4 \
  --eval_args "--env arith --limit 200 --max_new_tokens 32 --batch_size 100 --dtype bf16" \
  --archive experiments/results/archive/worker_deaths --results experiments/results/worker_deaths "$@"
