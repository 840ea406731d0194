#!/usr/bin/env bash
# Shared by the GPU launchers (single_gpu.sh, single_node.sh, multi_node.sh): the per-model and per-method settings
# of a run, written out so that the launcher documents it (DeepSpeed-Chat's convention). Sourced, not run.
#
# Usage of a launcher:  bash scripts/gpu/<deployment>.sh METHOD MODEL [extra train.py flags]
#   METHOD: any rl/methods/<name>.py (grpo | gdpo | dara | dvao | gd2po_hard | tcpo | mt_grpo | maestro have a
#           recipe below; another method runs with the shared settings and its own defaults)
#   MODEL: qwen3-4b | r1-distill-llama-8b
#   DRY_RUN=1 prints the deepspeed command and exits without running it (tests/benchmarks/test_gpu_scripts.py checks it).
#   Any setting below can be overridden from the environment (LR=2e-6 MAX_STEPS=50 ...); extra flags go last and
#   therefore win over the ones written here.
#
# None of these launchers has been run by us on a GPU: this repository's machines have none (see README, "GPU").
# multi_node.sh's per-node launch has run on CPU: its --cpu_dry_run, tests/run/test_multi_node.py.

credo_usage() {
  echo "usage: bash $0 METHOD MODEL [extra train.py flags]" >&2
  echo "  METHOD: a module of rl/methods/ (grpo, gdpo, dara, tcpo, mt_grpo, maestro, ...);  MODEL: qwen3-4b | r1-distill-llama-8b" >&2
  echo "  DRY_RUN=1 prints the command without running it" >&2
}

# credo_configure DEPLOYMENT METHOD MODEL: fills TRAIN_ARGS (an array) and OUTPUT.
credo_configure() {
  local deployment=$1 method=$2 model=$3

  # --- model: path, lengths, memory -------------------------------------------------------------------------------
  case "$model" in
    qwen3-4b)
      MODEL_PATH=${MODEL_PATH:-Qwen/Qwen3-4B}
      MAX_ANSWER=${MAX_ANSWER:-4096}        # Qwen3 reasons before answering; 4k new tokens per turn
      MICRO=${MICRO:-2}                      # responses per forward/backward (151k-vocab logits dominate memory)
      ;;
    r1-distill-llama-8b)
      MODEL_PATH=${MODEL_PATH:-deepseek-ai/DeepSeek-R1-Distill-Llama-8B}
      MAX_ANSWER=${MAX_ANSWER:-8192}        # R1 distills think long; DeepScaleR starts its RL at 8k
      MICRO=${MICRO:-1}
      ;;
    *) echo "unknown MODEL '$model'" >&2; credo_usage; return 2 ;;
  esac
  MAX_PROMPT=${MAX_PROMPT:-1024}
  DTYPE=${DTYPE:-bf16}                     # multi_node.sh --cpu_dry_run: fp32

  # --- deployment: ranks, ZeRO, offload, vLLM memory share ------------------------------------------------------
  case "$deployment" in
    single_gpu)
      PROMPTS_PER_RANK=${PROMPTS_PER_RANK:-4}
      # A full fine-tune of 4-8B parameters needs ~16 bytes per parameter of optimizer state: on one GPU it
      # goes to CPU memory (ZeRO-Offload), leaving room for vLLM and activations.
      OFFLOAD=${OFFLOAD:-1}
      VLLM_MEM=${VLLM_MEM:-0.35}
      ;;
    single_node|multi_node)
      PROMPTS_PER_RANK=${PROMPTS_PER_RANK:-8}   # 8 GPUs x 8 prompts x 8 samples = 512 responses per step
      OFFLOAD=${OFFLOAD:-0}                      # ZeRO-3 over 8+ GPUs holds an 8B model's state without offload
      VLLM_MEM=${VLLM_MEM:-0.3}                  # TRL's colocate default
      ;;
    *) echo "unknown deployment '$deployment'" >&2; return 2 ;;
  esac
  ZERO_STAGE=${ZERO_STAGE:-3}
  ROLLOUT_BACKEND=${ROLLOUT_BACKEND:-vllm}       # hf: generate with the actor (no vLLM installed)
  VLLM_TP=${VLLM_TP:-1}

  # --- method: algorithm and its knobs ---------------------------------------------------------------------------
  # Shared, paper-like RL-for-reasoning settings: lr 1e-6 (DeepSeekMath's GRPO and DAPO), G = 8 samples per prompt
  # (DeepSeekMath used 64; 8 is the common budget at this size), temperature 1.0 for rollouts (DAPO, verl's
  # recipes), token-mean loss aggregation (DAPO).
  LR=${LR:-1e-6}
  NUM_GENERATIONS=${NUM_GENERATIONS:-8}
  TEMPERATURE=${TEMPERATURE:-1.0}
  MAX_STEPS=${MAX_STEPS:-300}
  method_args=()
  case "$method" in
    grpo)
      # DeepSeekMath GRPO: symmetric clip 0.2 and a k3 KL to the reference with beta 0.04.
      method_args=(--algo grpo --beta 0.04 --kl_type k3 --clip_ratio_low 0.2 --clip_ratio_high 0.2)
      ;;
    gdpo)
      # Per-reward group normalisation of correctness and boxed-answer format, then batch normalisation.
      method_args=(--algo gdpo --reward_funcs correctness,format --format_style boxed --final_norm response
                   --beta 0.0 --clip_ratio_high 0.28)
      ;;
    dara)
      # DARA's main variant (asym) with the paper's weight cap w_max = 5.
      method_args=(--algo dara --dara_variant asym --dara_w_max 5 --reward_funcs correctness,format
                   --format_style boxed --final_norm response --beta 0.0 --clip_ratio_high 0.28)
      ;;
    dvao)
      # DVAO: the rewards' z-scores weighted by their in-group spread (base weights 1/K), no batch normalisation.
      method_args=(--algo dvao --reward_funcs correctness,format --format_style boxed
                   --beta 0.0 --clip_ratio_high 0.28)
      ;;
    gd2po_hard)
      # GD²PO-Hard: GDPO without sign-conflicting responses, q (the kept share) applied as the GD²PO authors' code.
      method_args=(--algo gd2po_hard --gd2po_weight_at advantage --reward_funcs correctness,format
                   --format_style boxed --final_norm response --beta 0.0 --clip_ratio_high 0.28)
      ;;
    tcpo)
      # Verify-and-refine on math: up to 3 attempts, TCPO's defaults (gamma 0.9, 5 counterfactual turns per rank).
      method_args=(--algo tcpo --max_turns 3 --tcpo_gamma 0.9 --tcpo_cf_budget 5 --tcpo_cf_samples 4
                   --beta 0.0 --clip_ratio_high 0.28)
      # Qwen3-4B (TCPO's model) runs multi-turn: episodes are token-in, token-out, so its template dropping earlier
      # turns' <think> blocks on a re-render does not stop it (docs/multi-turn.md).
      ;;
    maestro)
      # MAESTRO: the Conductor picks each response's emphasis between the verifier (correctness) and the boxed
      # format (fmt). It mixes --maestro_rewards itself, so --reward_funcs stays the default (validation refuses
      # others). The paper's open-domain set (fmt,ppl,ent,len,pref) is for tasks without a verifier; len's default
      # 16-64 token window and ppl/ent's extra forwards do not suit 4-8k-token reasoning answers.
      method_args=(--algo maestro --maestro_rewards correctness,fmt --format_style boxed --beta 0.0
                   --clip_ratio_high 0.28)
      ;;
    mt_grpo)
      # Zeng et al.'s turn-level GRPO on the same verify-and-refine protocol as tcpo (3 attempts).
      method_args=(--algo mt_grpo --max_turns 3 --mt_grpo_lambda 1.0 --beta 0.0 --clip_ratio_high 0.28)
      ;;
    *)
      # a method without a recipe here (a new rl/methods/<name>.py) runs with the shared settings below
      if [ -f "rl/methods/$method.py" ]; then
        method_args=(--algo "$method")
      else
        echo "unknown METHOD '$method'" >&2; credo_usage; return 2
      fi
      ;;
  esac

  DATA=${DATA:-data/math_train/train.jsonl}     # MATH train (7,470 problems, data/SOURCES.md)
  OUTPUT=${OUTPUT:-output/${method}_${model}_${deployment}}
  TRAIN_ARGS=(
    "${method_args[@]}"
    --env math --data_path "$DATA" --prompt_key problem --answer_key answer
    --model_name_or_path "$MODEL_PATH"
    --dtype "$DTYPE"
    --actor_zero_stage "$ZERO_STAGE"
    --per_device_generation_batch_size "$PROMPTS_PER_RANK"
    --num_generations "$NUM_GENERATIONS"
    --per_device_train_micro_batch_size "$MICRO"
    --max_prompt_seq_len "$MAX_PROMPT"
    --max_answer_seq_len "$MAX_ANSWER"
    --temperature "$TEMPERATURE" --top_p 1.0
    --actor_learning_rate "$LR" --lr_scheduler_type constant --num_warmup_steps 10
    --gradient_clipping 1.0
    --loss_agg_mode token-mean
    --max_steps "$MAX_STEPS"
    --rollout_backend "$ROLLOUT_BACKEND"
    --dist_timeout_minutes 30
    --save_steps 50 --save_total_limit 3
    --enable_tensorboard
    --output_dir "$OUTPUT"
  )
  if [ "$ROLLOUT_BACKEND" = vllm ]; then
    TRAIN_ARGS+=(--vllm_gpu_memory_utilization "$VLLM_MEM" --vllm_tensor_parallel_size "$VLLM_TP"
                 --vllm_is_correction tis --vllm_is_cap 2.0)
  fi
  if [ "$OFFLOAD" = 1 ]; then
    TRAIN_ARGS+=(--offload)
  fi
}

# credo_launch LAUNCHER_ARGS... -- EXTRA_TRAIN_ARGS...: run (or, with DRY_RUN=1, print) the deepspeed command,
# logging to $OUTPUT/training.log (or $OUTPUT/$TRAINING_LOG: one per node when each node runs its own launcher).
# CREDO_LAUNCHER (default deepspeed) is the command that takes the deepspeed arguments: multi_node.sh's per-node mode sets
# `python scripts/launch.py`, whose exit status is 1 when the node's launch process is killed (deepspeed's is 0).
credo_launch() {
  local launcher=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do launcher+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  local cmd
  read -r -a cmd <<< "${CREDO_LAUNCHER:-deepspeed}"
  cmd+=("${launcher[@]}" train.py "${TRAIN_ARGS[@]}" "$@")
  if [ "${DRY_RUN:-0}" = 1 ]; then
    printf '%q ' "${cmd[@]}"; echo
    return 0
  fi
  if [ ! -f "$DATA" ]; then
    echo "training data $DATA not found: copy MATH train with" >&2
    echo "  mkdir -p data/math_train && cp ../shared/data/math_train/train.jsonl data/math_train/  (or set DATA=)" >&2
    return 1
  fi
  mkdir -p "$OUTPUT"
  local log="$OUTPUT/${TRAINING_LOG:-training.log}"
  echo "+ ${cmd[*]}" | tee "$log"
  "${cmd[@]}" 2>&1 | tee -a "$log"
  return "${PIPESTATUS[0]}"
}
