#!/usr/bin/env bash
# The warm start (DeepSpeed-Chat's step 1 before credo's RL): SmolLM2-135M-Instruct fine-tuned on an env's own train
# split, so that RL starts where the seeds' signals exist (docs/sft.md; the length was chosen by
# experiments/sweeps/warm_start.sh, whose report is experiments/results/warm_start.md).
#   bash scripts/warm_start.sh toolcall   # BFCL's short-schema Python questions, ToolRL's prompt without examples
#   bash scripts/warm_start.sh mixed      # MAESTRO's task mix, boxed answers
# Writes output/warm_start/<env>/{data.jsonl, sft/}; the model RL starts from is output/warm_start/<env>/sft/final.
# Then, e.g.: python train.py --model_name_or_path output/warm_start/toolcall/sft/final $TOOLCALL_DATA ...
# Settings are environment variables (STEPS, LR, SAVE_EVERY, OUT, DTYPE); extra arguments go to sft.py.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${SKIP_SETUP:-0}" = 1 ] || bash scripts/setup.sh >/dev/null  # SKIP_SETUP=1: a frozen worktree sharing this .venv
. .venv/bin/activate
ENV_NAME=${1:?usage: bash scripts/warm_start.sh toolcall|mixed [sft.py flags]}
shift
MODEL=${MODEL:-.cache/models/SmolLM2-135M-Instruct}
OUT=${OUT:-output/warm_start/$ENV_NAME}
case "$ENV_NAME" in
  # the DARA sweeps' questions (experiments/sweeps/dara_toolcall.sh) in ToolRL's and DARA's prompt: no worked examples
  toolcall) DATA="--env toolcall --toolcall_categories simple_python,multiple,parallel,parallel_multiple --toolcall_max_schema_chars 1200 --no-toolcall_example"
            N=${N:-1000}; STEPS=${STEPS:-40}; ANSWER=96 ;;  # 40: the sweep's pick (the shortest export meeting its target)
  mixed)    DATA="--env mixed"; N=${N:-1000}; STEPS=${STEPS:-5}; ANSWER=48 ;;  # 5: the sweep's pick
  *) echo "scripts/warm_start.sh: toolcall or mixed, got '$ENV_NAME'" >&2; exit 2 ;;
esac
mkdir -p "$OUT"
# shellcheck disable=SC2086
python -m rl.sft.warm_start_data $DATA --n "$N" --out "$OUT/data.jsonl"
# Constant LR after a short warmup (credo's reading): an export at step s is then the model an s-step run would give,
# which is how the sweep chose STEPS from one run's exports.
# shellcheck disable=SC2086
python sft.py $DATA --model_name_or_path "$MODEL" --data_path "$OUT/data.jsonl" --max_steps "$STEPS" \
    --per_device_train_batch_size 4 --gradient_accumulation_steps 2 --actor_learning_rate "${LR:-5e-5}" \
    --num_warmup_steps 2 --lr_scheduler_type constant --max_seq_len 2048 --max_answer_seq_len "$ANSWER" \
    --eval_limit 40 --dtype "${DTYPE:-auto}" --save_strategy final --save_model_only_steps "${SAVE_EVERY:-0}" \
    --output_dir "$OUT/sft" --resume none "$@"
echo "warm start: $OUT/sft/final"
