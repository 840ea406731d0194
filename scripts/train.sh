#!/usr/bin/env bash
# The README's main job: GRPO on synthetic arithmetic with SmolLM2-135M-Instruct on CPU under the real `deepspeed`
# launcher at train.py's default system flags; greedy accuracy on 200 held-out prompts before and after.
#
# Every setting can be overridden from the environment, and extra arguments go to train.py, e.g.
#   NUM_RANKS=2 MAX_STEPS=10 bash scripts/train.sh --actor_learning_rate 1e-5
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate

MODEL=${MODEL:-.cache/models/SmolLM2-135M-Instruct}
OUTPUT=${OUTPUT:-output/grpo_arith_smollm2}
NUM_RANKS=${NUM_RANKS:-1}          # 1 rank x 2 threads beats 2 ranks x 1 thread here (26 s vs 44 s a step)
# empty: train.py's default, ZeRO stage 0 in one process (DeepSpeed-Chat's single_gpu scripts), 3 on several ranks
ZERO_STAGE=${ZERO_STAGE:-}
# auto: bf16 where a bf16 matmul probe measured >= 1.25x fp32's speed on this machine (AMX, AVX-512 BF16), else fp32
# (AVX2 only: bf16 is emulated at ~0.01x); train.py and eval.py print the choice and the measurement (rl/engine/hardware.py).
DTYPE=${DTYPE:-auto}
MAX_STEPS=${MAX_STEPS:-24}
LR=${LR:-2e-5}
PROMPTS_PER_RANK=${PROMPTS_PER_RANK:-8}
NUM_GENERATIONS=${NUM_GENERATIONS:-4}
MAX_NEW_TOKENS=${MAX_NEW_TOKENS:-32}
TEMPERATURE=${TEMPERATURE:-0.7}
EVAL_SAMPLES=${EVAL_SAMPLES:-200}
SEED=${SEED:-1234}
RESUME=${RESUME:-none}             # auto: continue a killed run in $OUTPUT from its latest checkpoint
PORT=${PORT:-}                      # empty: scripts/launch.py picks a free one (29500 when free)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( $(nproc) / NUM_RANKS > 0 ? $(nproc) / NUM_RANKS : 1 ))}

mkdir -p "$OUTPUT"
LOG="$OUTPUT/training.log"
: > "$LOG"
# tee -i: a terminal Ctrl-C must not kill the log pipe while the ranks are still saving (scripts/launch.py waits)
run() { echo "+ $*" | tee -a "$LOG"; "$@" 2>&1 | tee -ia "$LOG"; }

run python eval.py --model_name_or_path "$MODEL" --env arith --limit "$EVAL_SAMPLES" \
    --max_new_tokens "$MAX_NEW_TOKENS" --dtype "$DTYPE" --batch_size 100 \
    --output_dir "$OUTPUT/eval_initial" --label "initial accuracy"

# scripts/launch.py is the deepspeed launcher with a free port and a Ctrl-C that waits for the ranks' save.
train_start=$(date +%s.%N)
run python scripts/launch.py --num_gpus "$NUM_RANKS" ${PORT:+--master_port "$PORT"} train.py \
    --algo grpo \
    --env arith \
    --model_name_or_path "$MODEL" \
    ${ZERO_STAGE:+--actor_zero_stage "$ZERO_STAGE"} \
    --dtype "$DTYPE" \
    --per_device_generation_batch_size "$PROMPTS_PER_RANK" \
    --num_generations "$NUM_GENERATIONS" \
    --max_answer_seq_len "$MAX_NEW_TOKENS" \
    --temperature "$TEMPERATURE" \
    --actor_learning_rate "$LR" \
    --max_steps "$MAX_STEPS" \
    --beta 0 \
    --seed "$SEED" \
    --resume "$RESUME" \
    --output_dir "$OUTPUT" \
    --enable_tensorboard \
    "$@"
# the training phase's wall time (launcher start to the ranks' exit: start-up, steps, checkpoint, export), which the
# README's "minutes of training" and benchmarks/main_job_vs_trl.py's matched TRL budget mean
python -c "import json, sys; json.dump({'train_wall_seconds': float(sys.argv[2]) - float(sys.argv[1])}, open(sys.argv[3], 'w'))" \
    "$train_start" "$(date +%s.%N)" "$OUTPUT/train_wall.json"

if [ -d "$OUTPUT/final" ]; then
  run python eval.py --model_name_or_path "$OUTPUT/final" --env arith --limit "$EVAL_SAMPLES" \
      --max_new_tokens "$MAX_NEW_TOKENS" --dtype "$DTYPE" --batch_size 100 \
      --output_dir "$OUTPUT/eval_final" --label "final accuracy"
else  # --no_final_export: nothing to evaluate (convert a checkpoint with DeepSpeed's zero_to_fp32.py to get one)
  echo "no $OUTPUT/final (--no_final_export?): final evaluation skipped" | tee -a "$LOG"
fi

echo "== summary" | tee -a "$LOG"
python scripts/summarize_run.py "$OUTPUT" | tee -a "$LOG"
