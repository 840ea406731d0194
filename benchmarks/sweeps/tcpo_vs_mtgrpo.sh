#!/usr/bin/env bash
# Issue #18 item 6: TCPO vs MT-GRPO vs trajectory GRPO (best-turn score) on the graded three-sum arith, every episode
# played to 3 turns; 3 paired seeds x 40 steps (design, fixed before the runs:
# benchmarks/results/tcpo_vs_mtgrpo.preregistration.md). Resumable (a killed run continues from its checkpoint,
# saved every 5 steps); `--partial` reports finished seeds.
#   bash benchmarks/sweeps/tcpo_vs_mtgrpo.sh base    # the base model's rates, first
#   bash benchmarks/sweeps/tcpo_vs_mtgrpo.sh [--plan | --partial]
set -euo pipefail
cd "$(dirname "$0")/../.."
. .venv/bin/activate
EVAL="--env arith_multi --max_turns 3 --episode_end max_turns --limit 100 --n 4 --k 1,4 --temperature 0.7 --max_new_tokens 64 --batch_size 100 --dtype fp32"
if [ "${1:-}" = base ]; then
  # shellcheck disable=SC2086
  exec python eval.py --model_name_or_path .cache/models/SmolLM2-135M-Instruct $EVAL \
    --output_dir benchmarks/results/archive/tcpo_vs_mtgrpo/base_model
fi
exec python benchmarks/compare.py --name tcpo_vs_mtgrpo --seeds 1,2,3 \
  --method grpo-best="--algo grpo --traj_score best" --method mt_grpo="--algo mt_grpo" --method tcpo="--algo tcpo" \
  --train_args "--env arith_multi --max_turns 3 --episode_end max_turns --model_name_or_path .cache/models/SmolLM2-135M-Instruct --max_steps 40 --per_device_generation_batch_size 8 --num_generations 4 --max_answer_seq_len 64 --temperature 0.7 --actor_learning_rate 2e-5 --beta 0 --actor_zero_stage 0 --dtype fp32 --save_steps 5" \
  --metric eval:regression_rate:lower \
  --also eval:best_turn_pass@4 --also eval:final_turn_pass@1 --also eval:preservation_rate \
  --eval_args "$EVAL" \
  --archive benchmarks/results/archive/tcpo_vs_mtgrpo "$@"
