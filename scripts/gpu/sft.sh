#!/usr/bin/env bash
# The warm start on GPUs (DeepSpeed-Chat's step 1): supervised fine-tuning on an env's train split, then RL from its
# export with the RL launchers. Two lines, e.g. DARA's tool calling with its paper-side model:
#   bash scripts/gpu/sft.sh toolcall qwen2.5-1.5b
#   MODEL_PATH=output/sft_toolcall_qwen2.5-1.5b/final bash scripts/gpu/dara_toolcall.sh dara-asym qwen2.5-1.5b
# or math reasoning:
#   bash scripts/gpu/sft.sh math qwen3-4b
#   MODEL_PATH=output/sft_math_qwen3-4b/final bash scripts/gpu/single_node.sh grpo qwen3-4b
# ENV: toolcall (BFCL's train split, the prompt dara_toolcall.sh trains with: no worked examples) | math (MATH
# train's answers, boxed) | mixed (MAESTRO's CPU task mix). MODEL: qwen2.5-1.5b | qwen3-4b | r1-distill-llama-8b.
# DRY_RUN=1 prints the two commands (data, then deepspeed) and runs nothing (tests/benchmarks/test_gpu_sft_script.py).
#
# Settings (credo's reading: none of the seeds' papers gives its cold-start recipe; these are DeepSpeed-Chat step 1's
# and TRL SFTTrainer's usual values for instruct models of this size): lr 1e-5 with 10 warmup steps and a cosine
# decay, 2 epochs, 64 sequences per step (NUM_GPUS x BATCH x ACCUM), bf16, ZeRO-3. Every value can be overridden from
# the environment; extra flags go last and win. On CPU the same step is scripts/warm_start.sh (docs/sft.md).
set -euo pipefail
cd "$(dirname "$0")/../.."

usage() {
  echo "usage: bash $0 ENV MODEL [extra sft.py flags]" >&2
  echo "  ENV: toolcall | math | mixed;  MODEL: qwen2.5-1.5b | qwen3-4b | r1-distill-llama-8b" >&2
  echo "  DRY_RUN=1 prints the commands without running them" >&2
}
[ $# -ge 2 ] || { usage; exit 2; }
ENV_NAME=$1 MODEL=$2; shift 2

case "$MODEL" in
  qwen2.5-1.5b) MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-1.5B-Instruct} ;;
  qwen3-4b) MODEL_PATH=${MODEL_PATH:-Qwen/Qwen3-4B} ;;
  r1-distill-llama-8b) MODEL_PATH=${MODEL_PATH:-deepseek-ai/DeepSeek-R1-Distill-Llama-8B} ;;
  *) echo "unknown MODEL '$MODEL'" >&2; usage; exit 2 ;;
esac
case "$ENV_NAME" in
  toolcall) ENV_ARGS=(--env toolcall --no-toolcall_example); DATA_ARGS=(); MAX_SEQ=${MAX_SEQ:-5120}; ANSWER=1024 ;;
  math) ENV_ARGS=(--env math); DATA_ARGS=(--data_path data/math_train/train.jsonl); MAX_SEQ=${MAX_SEQ:-2048}; ANSWER=1024 ;;
  mixed) ENV_ARGS=(--env mixed); DATA_ARGS=(); MAX_SEQ=${MAX_SEQ:-512}; ANSWER=48 ;;
  *) echo "unknown ENV '$ENV_NAME'" >&2; usage; exit 2 ;;
esac

NUM_GPUS=${NUM_GPUS:-8}
OUTPUT=${OUTPUT:-output/sft_${ENV_NAME}_${MODEL}}
SFT_DATA=${SFT_DATA:-$OUTPUT/data.jsonl}
data_cmd=(python -m rl.sft.warm_start_data "${ENV_ARGS[@]}" "${DATA_ARGS[@]}" --n "${N:-100000}" --out "$SFT_DATA")
SFT_ARGS=(
  "${ENV_ARGS[@]}" --data_path "$SFT_DATA"
  --model_name_or_path "$MODEL_PATH"
  --dtype "${DTYPE:-bf16}" --actor_zero_stage "${ZERO_STAGE:-3}"
  --per_device_train_batch_size "${BATCH:-4}" --gradient_accumulation_steps "${ACCUM:-2}"
  --num_train_epochs "${EPOCHS:-2}" --max_seq_len "$MAX_SEQ"
  --actor_learning_rate "${LR:-1e-5}" --lr_scheduler_type cosine --num_warmup_steps 10 --gradient_clipping 1.0
  --eval_steps "${EVAL_STEPS:-50}" --eval_limit 200 --max_answer_seq_len "$ANSWER"
  --save_steps 100 --save_total_limit 2 --enable_tensorboard
  --output_dir "$OUTPUT"
)
[ "${OFFLOAD:-0}" = 1 ] && SFT_ARGS+=(--offload)
cmd=(deepspeed --num_gpus "$NUM_GPUS" --master_port "${PORT:-29500}" sft.py "${SFT_ARGS[@]}" "$@")
if [ "${DRY_RUN:-0}" = 1 ]; then
  printf '%q ' "${data_cmd[@]}"; echo
  printf '%q ' "${cmd[@]}"; echo
  exit 0
fi
mkdir -p "$OUTPUT"
[ -f "$SFT_DATA" ] || "${data_cmd[@]}"
echo "+ ${cmd[*]}" | tee "$OUTPUT/training.log"
"${cmd[@]}" 2>&1 | tee -a "$OUTPUT/training.log"
exit "${PIPESTATUS[0]}"
