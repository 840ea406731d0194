#!/usr/bin/env bash
# DARA's tool-calling experiment (issue #48; DARA section 4.1) on GPUs: one arm, one model, one seed per call.
#   bash scripts/gpu/dara_toolcall.sh ARM MODEL [extra train.py flags]
#   SEED=2 NUM_GPUS=8 bash scripts/gpu/dara_toolcall.sh dara-asym-think qwen2.5-1.5b
#   DRY_RUN=1 bash scripts/gpu/dara_toolcall.sh gdpo qwen2.5-1.5b     # prints the deepspeed command, runs nothing
# ARM: dara-asym | gdpo | grpo, each on tool_format,tool_correct; dara-asym-think | gdpo-think | grpo-think add
#      think_length (Table 2's setting). The pre-registered comparison runs all six x SEED=1,2,3
#      (experiments/results/dara_toolcall.preregistration.md; its CPU analogue: experiments/sweeps/dara_toolcall.sh).
# MODEL: qwen2.5-1.5b (Qwen/Qwen2.5-1.5B-Instruct; MODEL_PATH= for another, e.g. a local copy).
# Then the held-out eval (BFCL's 511 held-out questions, Table 1's Avg Accuracy / Avg Format):
#   python eval.py --model_name_or_path OUTPUT/final --env toolcall --no-toolcall_example --limit 511 \
#       --max_new_tokens 1024 --output_dir OUTPUT/eval
#
# Where the numbers come from. DARA's own text is not recorded in this repository; its tool-calling setting follows
# GDPO's (ToolRL's prompt, a format and a correctness reward), and the values below are those of GDPO's released
# tool-calling script (NVlabs/GDPO, verl-GDPO/train_gdpo.sh): Qwen2.5-1.5B-Instruct, 512 prompts per step x 4
# responses, lr 1e-6, prompts up to 2048 and responses up to 1024 tokens, verl mini-batches of 128 prompts, no KL
# loss, 100 steps (its README), verl's rollout temperature 1.0. Check them against DARA's section 4.1 and appendix D
# before comparing with the paper's numbers. credo's readings where they differ:
#   - data: BFCL v4's train split (envs/toolcall_data.py), not ToolRL's 4k rows; evaluation on BFCL's held-out split.
#   - prompts: 4096 tokens (the env's default): BFCL's schemas run longer than ToolRL's (MAX_PROMPT= to change).
#   - no example in the prompt (--no-toolcall_example): ToolRL's and DARA's prompt; the 135M CPU analogue needs them.
#   - tool_correct: BFCL's AST checker, 0 or 1 (issue #48); CORRECT_MODE=toolrl gives GDPO's script's [-3, 3].
#   - KL: --beta 0 (GDPO's script turns the KL loss off; its 0.001 KL-in-reward is left out).
#   - FILTER=1 adds dynamic filtering on the summed reward (--filter_groups_metric reward_sum), which DARA's D.1
#     describes; GDPO's script does not filter, so it is off by default and, when on, applies to every arm alike.
# Deployment as scripts/gpu/single_node.sh: ZeRO-3, bf16, one colocated vLLM engine per GPU (ROLLOUT_BACKEND=hf
# without vLLM); OFFLOAD=1 on a single GPU. Every value below can be overridden from the environment; extra flags go
# last and win. tests/benchmarks/test_gpu_scripts.py checks each arm's command against train.py's validation.
set -euo pipefail
cd "$(dirname "$0")/../.."

usage() {
  echo "usage: bash $0 ARM MODEL [extra train.py flags]" >&2
  echo "  ARM: dara-asym | gdpo | grpo | dara-asym-think | gdpo-think | grpo-think;  MODEL: qwen2.5-1.5b" >&2
  echo "  DRY_RUN=1 prints the command without running it" >&2
}
[ $# -ge 2 ] || { usage; exit 2; }
ARM=$1 MODEL=$2; shift 2

case "$MODEL" in
  qwen2.5-1.5b) MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-1.5B-Instruct} ;;
  *) echo "unknown MODEL '$MODEL'" >&2; usage; exit 2 ;;
esac

REWARDS=tool_format,tool_correct
case "$ARM" in
  *-think) REWARDS=$REWARDS,think_length; METHOD=${ARM%-think} ;;
  *) METHOD=$ARM ;;
esac
case "$METHOD" in
  dara-asym) method_args=(--algo dara --dara_variant asym --dara_w_max "${W_MAX:-5}") ;;  # 5: the authors' code
  gdpo) method_args=(--algo gdpo) ;;
  grpo) method_args=(--algo grpo) ;;  # GRPO on the summed reward: tool_format + tool_correct (+ think_length)
  *) echo "unknown ARM '$ARM'" >&2; usage; exit 2 ;;
esac

NUM_GPUS=${NUM_GPUS:-8}
PROMPTS_PER_STEP=${PROMPTS_PER_STEP:-512}     # GDPO's data.train_batch_size
if [ $((PROMPTS_PER_STEP % NUM_GPUS)) -ne 0 ]; then
  echo "PROMPTS_PER_STEP $PROMPTS_PER_STEP is not a multiple of NUM_GPUS $NUM_GPUS" >&2; exit 2
fi
SEED=${SEED:-1}
OUTPUT=${OUTPUT:-output/dara_toolcall/${ARM}_${MODEL}_seed${SEED}}
ROLLOUT_BACKEND=${ROLLOUT_BACKEND:-vllm}
TRAIN_ARGS=(
  "${method_args[@]}"
  --env toolcall --no-toolcall_example --reward_funcs "$REWARDS" --tool_correct_mode "${CORRECT_MODE:-ast}"
  --model_name_or_path "$MODEL_PATH" --seed "$SEED"
  --dtype "${DTYPE:-bf16}" --actor_zero_stage "${ZERO_STAGE:-3}"
  --per_device_generation_batch_size $((PROMPTS_PER_STEP / NUM_GPUS))
  --num_generations "${NUM_GENERATIONS:-4}"                 # GDPO's rollout.n
  --ppo_mini_batch_size "${MINI_BATCH:-128}"                # GDPO's ppo_mini_batch_size (prompts, verl's meaning)
  --per_device_train_micro_batch_size "${MICRO:-8}"
  --max_prompt_seq_len "${MAX_PROMPT:-4096}" --max_answer_seq_len "${MAX_ANSWER:-1024}"
  --temperature "${TEMPERATURE:-1.0}" --top_p 1.0
  --actor_learning_rate "${LR:-1e-6}" --lr_scheduler_type constant
  --beta 0 --max_steps "${MAX_STEPS:-100}"
  --rollout_backend "$ROLLOUT_BACKEND"
  --save_steps 10 --save_total_limit 2 --enable_tensorboard
  --output_dir "$OUTPUT"
)
if [ "${FILTER:-0}" = 1 ]; then
  TRAIN_ARGS+=(--filter_groups --filter_groups_metric reward_sum)
fi
if [ "$ROLLOUT_BACKEND" = vllm ]; then
  TRAIN_ARGS+=(--vllm_gpu_memory_utilization "${VLLM_MEM:-0.3}" --vllm_is_correction tis --vllm_is_cap 2.0)
fi
if [ "${OFFLOAD:-0}" = 1 ]; then
  TRAIN_ARGS+=(--offload)
fi

cmd=(deepspeed --num_gpus "$NUM_GPUS" --master_port "${PORT:-29500}" train.py "${TRAIN_ARGS[@]}" "$@")
if [ "${DRY_RUN:-0}" = 1 ]; then
  printf '%q ' "${cmd[@]}"; echo
  exit 0
fi
mkdir -p "$OUTPUT"
echo "+ ${cmd[*]}" | tee "$OUTPUT/training.log"
"${cmd[@]}" 2>&1 | tee -a "$OUTPUT/training.log"
exit "${PIPESTATUS[0]}"
