#!/usr/bin/env bash
# The CUDA checks CPU cannot make, in one short run (a few minutes) on a lent GPU machine that has torch (CUDA) and
# transformers but no DeepSpeed, no vLLM and no network. Nothing is downloaded: DeepSpeed comes along as wheels.
#   1. a tiny random Llama built in code (tests/helpers.py) through train.py: ZeRO-3, bf16, 2 steps, with a reference;
#   2. --enable_hybrid_engine on that Llama: one warning that rl/engine/actor.py refuses it, then gather-and-generate;
#   3. rl/engine/dist.py on a one-rank NCCL group: every collective gets the GPU tensor, results come back on the caller's
#      device (scripts/gpu/dist_probe.py).
#   4. --offload under ZeRO-3 at --dtype auto (bf16 on CUDA): DeepSpeedCPUAdam built there, 2 steps;
#   5. --lora_r 4 --gradient_checkpointing under ZeRO-3, bf16, 2 steps;
#   6. eval.py (one process, no launcher) on the tiny Llama, 2 turns x 2 samples: a results.json from the GPU;
#   7. the methods whose data crosses devices: --algo tcpo (3 turns to the end), maestro (its Conductor and a
#      tiny reward model for pref), dara;
#   8. exact resume: a run stopped after step 1 and resumed samples at step 2 what an uninterrupted run sampled
#      (the CUDA generator is in the checkpoint).
# The checks run side by side (one GPU, 16 cores, each launch on its own port); SERIAL=1 runs them in turn, and
# ONLY="NAME ..." runs the named checks alone (a rerun of the failed ones).
# Writes $OUT/cuda_check.md (what ran, versions, pass/fail, the tails of the logs) and the logs beside it.
#
# Here (network or package index, before the GPU session):  bash scripts/gpu/cuda_check.sh --prepare
#   builds .whl/ (git-ignored, ~14 MB): `pip wheel deepspeed==0.19.8 --no-deps -w .whl/` plus the wheels of its
#   import-time dependencies for CPython 3.10-3.13 on x86_64 (scripts/gpu/offline_wheels.py lists them).
# On the GPU machine (the device tool, with carry [".whl"]):  bash scripts/gpu/cuda_check.sh
#   ALLOW_CPU=1 runs the same steps on CPU (fp32, gloo) to check the script itself.
set -uo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}

if [ "${1:-}" = --prepare ]; then
  set -e
  mkdir -p .whl
  "$PYTHON" -m pip wheel deepspeed==0.19.8 --no-deps -w .whl/
  "$PYTHON" -m pip download --no-deps -d .whl hjson==3.1.0 einops==0.8.2 py-cpuinfo==9.0.0 annotated-types==0.8.0 \
    typing-inspection==0.4.5 typing_extensions==4.16.0 pydantic==2.14.4
  for v in 3.10 3.11 3.12 3.13; do
    "$PYTHON" -m pip download --no-deps -d .whl --only-binary=:all: --python-version "$v" \
      --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 pydantic_core==2.50.5 msgpack==1.2.4
  done
  "$PYTHON" -m pip download --no-deps -d .whl --only-binary=:all: --python-version 3.11 \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 psutil==7.2.2 ninja==1.13.2
  du -sh .whl
  exit 0
fi

OUT=${OUT:-output/cuda_check}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
REPORT="$OUT/cuda_check.md"
DEPS=${DEPS:-/tmp/credo_gpu_deps}
STEP_TIMEOUT=${STEP_TIMEOUT:-240}
ALL_CHECKS="zero3_bf16 hybrid_engine dist_probe offload lora_gc eval tcpo maestro dara resume"
for name in ${ONLY:-}; do  # ONLY="tcpo resume": those alone; a name that is no check stops before anything runs
  [[ " $ALL_CHECKS " == *" $name "* ]] || { echo "cuda_check: ONLY names '$name'; the checks: $ALL_CHECKS" >&2; exit 2; }
done

if "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  DTYPE=bf16
elif [ "${ALLOW_CPU:-0}" = 1 ]; then
  DTYPE=fp32
else
  echo "cuda_check: torch sees no CUDA device (ALLOW_CPU=1 runs the steps on CPU)" >&2
  exit 1
fi

{
  echo "# cuda_check ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
  echo
  echo '```'
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || echo "no nvidia-smi"
  "$PYTHON" -c "import sys, torch, transformers; print('python', sys.version.split()[0], '| torch', torch.__version__,
'cuda', torch.version.cuda, '| transformers', transformers.__version__)"
  echo '```'
} > "$REPORT"

# DeepSpeed and what it imports, unpacked from .whl/ where this Python lacks them.
if ! "$PYTHON" scripts/gpu/offline_wheels.py .whl "$DEPS" > "$OUT/deps.log" 2>&1; then
  cat "$OUT/deps.log" >&2
  { echo; echo "**stopped: DeepSpeed could not be made importable**"; echo '```'; cat "$OUT/deps.log"; echo '```'; } \
    >> "$REPORT"
  exit 1
fi
export PYTHONPATH="$DEPS:$PWD${PYTHONPATH:+:$PYTHONPATH}" TOKENIZERS_PARALLELISM=false
ds_version=$("$PYTHON" -c 'import deepspeed; print(deepspeed.__version__, deepspeed.__file__)' 2>&1 | tail -1)
{ echo; echo "deepspeed: $ds_version"; } >> "$REPORT"

"$PYTHON" -c "from tests.helpers import build_tiny_model, build_tiny_reward_model as rm
rm(build_tiny_model('$OUT/tiny_llama'), '$OUT/tiny_rm')" > "$OUT/tiny_llama.log" 2>&1  # tiny_rm: MAESTRO's pref

launch() {  # launch NAME SCRIPT ARGS...: the real deepspeed launcher, one rank, log to $OUT/NAME.log
  local name=$1; shift
  timeout "$STEP_TIMEOUT" "$PYTHON" -m deepspeed.launcher.runner --num_gpus 1 --master_port "${PORT:-29517}" "$@" \
    > "$OUT/$name.log" 2>&1
}

CHECKS=()   # the checks' names, in the report's order
check() {  # check NAME DESCRIPTION COMMAND...: run COMMAND on its own port (in the background unless SERIAL=1)
  local name=$1 what=$2; shift 2
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return 0; fi
  CHECKS+=("$name")
  printf '%s\n' "$what" > "$OUT/$name.what"
  local port=$((${PORT:-29517} + ${#CHECKS[@]}))
  if [ "${SERIAL:-0}" = 1 ]; then run_check "$name" "$port" "$@"; else run_check "$name" "$port" "$@" & fi
}

run_check() {  # run_check NAME PORT COMMAND...: $OUT/NAME.status = "ok|FAILED SECONDS"
  local name=$1 port=$2 t0=$SECONDS status; shift 2
  if PORT=$port "$@"; then status=ok; else status=FAILED; fi
  echo "$status $((SECONDS - t0))" > "$OUT/$name.status"
  echo "$name: $status"
}

TINY=(--model_name_or_path "$OUT/tiny_llama" --env tests.fixture_envs:DigitFractionEnv --num_generations 4
      --per_device_generation_batch_size 2 --max_answer_seq_len 12 --temperature 1.0 --actor_learning_rate 1e-2
      --num_train_samples 200 --actor_zero_stage 3 --dtype "$DTYPE" --resume none --no_final_export)

two_finite_steps() {  # two_finite_steps NAME: NAME's metrics.jsonl holds 2 steps, finite, none skipped
  "$PYTHON" - "$OUT/$1/metrics.jsonl" >> "$OUT/$1.log" 2>&1 <<'EOF'
import json, math, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
keys = ("actor/loss", "actor/grad_norm", "actor/kl", "train/skipped_step")
for row in rows:
    print({k: row.get(k) for k in keys})
assert len(rows) == 2, f"{len(rows)} steps logged"
assert all(math.isfinite(r["actor/loss"]) and math.isfinite(r["actor/grad_norm"]) for r in rows)
assert all(r["train/skipped_step"] == 0 for r in rows)
print("2 steps, finite loss and gradient norm, none skipped")
EOF
}

zero3_two_steps() {
  launch zero3_bf16 train.py "${TINY[@]}" --beta 0.05 --max_steps 2 --output_dir "$OUT/zero3_bf16" || return 1
  two_finite_steps zero3_bf16
}

offload_two_steps() {  # the optimizer on the CPU (DeepSpeedCPUAdam, JIT-built), the parameters on the GPU
  launch offload train.py "${TINY[@]}" --offload --dtype auto --max_steps 2 --output_dir "$OUT/offload" || return 1
  two_finite_steps offload || return 1
  [ "$DTYPE" = fp32 ] || grep -q -- "--dtype auto: bf16" "$OUT/offload.log"  # on CUDA auto must mean bf16
}

lora_checkpointing_two_steps() {
  launch lora_gc train.py "${TINY[@]}" --lora_r 4 --lora_alpha 8 --gradient_checkpointing --beta 0.05 --max_steps 2 \
    --output_dir "$OUT/lora_gc" || return 1
  two_finite_steps lora_gc
}

tcpo_two_steps() {  # turn-level credit, counterfactual turns sampled on the GPU, every episode played to 3 turns
  launch tcpo train.py "${TINY[@]}" --algo tcpo --max_turns 3 --episode_end max_turns --tcpo_cf_budget 3 \
    --max_steps 2 --output_dir "$OUT/tcpo" || return 1
  two_finite_steps tcpo
}

maestro_two_steps() {  # the Conductor mixes policy rewards (pref from a reward model) read off the GPU actor
  launch maestro train.py "${TINY[@]}" --algo maestro --env mixed --maestro_update_interval 2 --maestro_lr 1e-2 \
    --len_min 4 --len_max 12 --reward_model_name_or_path "$OUT/tiny_rm" --max_steps 2 --output_dir "$OUT/maestro" \
    || return 1
  two_finite_steps maestro
}

exact_resume() {  # stop after step 1, resume: step 2 samples what the uninterrupted run's step 2 sampled
  launch resume_full train.py "${TINY[@]}" --max_steps 2 --output_dir "$OUT/resume_full" || return 1
  local split=(train.py "${TINY[@]}" --max_steps 2 --output_dir "$OUT/resume_split")
  launch resume "${split[@]}" --enable_test_mode --test_stop_step 1 || return 1
  cp "$OUT/resume.log" "$OUT/resume_first_half.log"
  launch resume "${split[@]}" --resume auto || return 1
  "$PYTHON" - "$OUT/resume_full/metrics.jsonl" "$OUT/resume_split/metrics.jsonl" >> "$OUT/resume.log" 2>&1 <<'EOF'
import json, sys
full, split = ([json.loads(line) for line in open(path) if line.strip()] for path in sys.argv[1:])
keys = ("reward/mean", "response_length/mean", "actor/loss")
for name, rows in (("uninterrupted", full), ("resumed", split)):
    print(name, [{k: r.get(k) for k in ("step",) + keys} for r in rows])
assert [r["step"] for r in split] == [1, 2], "the resumed run did not log steps 1 and 2"
# the sampled responses decide reward and length: equal when every generator (the GPU's too) was restored
assert all(full[1][k] == split[1][k] for k in keys[:2]), "step 2 after the resume sampled other responses"
print("step 2 after the resume sampled what the uninterrupted run sampled")
EOF
}

dara_two_steps() {  # several reward components through the killable reward workers, DARA's density weights
  launch dara train.py "${TINY[@]}" --algo dara --dara_variant asym --reward_funcs correctness,length --length_limit 4 \
    --max_steps 2 --output_dir "$OUT/dara" || return 1
  two_finite_steps dara
}

eval_on_the_gpu() {
  timeout "$STEP_TIMEOUT" "$PYTHON" eval.py --model_name_or_path "$OUT/tiny_llama" \
    --env tests.fixture_envs:DigitFractionEnv --limit 8 --n 2 --k 1,2 --max_turns 2 --temperature 1.0 \
    --max_new_tokens 6 --output_dir "$OUT/eval" > "$OUT/eval.log" 2>&1 || return 1
  "$PYTHON" -c "import json, sys; r = json.load(open(sys.argv[1])); n = len(r['problems']); print(n, 'problems,',
{k: r['metrics'][k] for k in ('pass@1', 'best_turn_pass@2')}); sys.exit(n != 8)" "$OUT/eval/results.json" \
    >> "$OUT/eval.log" 2>&1
}

hybrid_engine_refused() {
  launch hybrid_engine train.py "${TINY[@]}" --enable_hybrid_engine --max_steps 1 --output_dir "$OUT/hybrid_engine" \
    || return 1
  local expected="enable_hybrid_engine: the DeepSpeed hybrid engine cannot generate for model type 'llama'" n
  if [ "$DTYPE" = fp32 ]; then expected="enable_hybrid_engine: the DeepSpeed hybrid engine needs CUDA"; fi  # ALLOW_CPU
  n=$(grep -c "$expected" "$OUT/hybrid_engine.log")
  echo "warnings '$expected': $n" >> "$OUT/hybrid_engine.log"
  [ "$n" = 1 ]
}

collectives_on_the_gpu() {
  launch dist_probe scripts/gpu/dist_probe.py --out "$OUT/dist_probe.json"
}

check zero3_bf16 "train.py, tiny random Llama, ZeRO-3 ($DTYPE), beta 0.05 (a ZeRO-3 reference), 2 steps" zero3_two_steps
check hybrid_engine "--enable_hybrid_engine on the Llama: one warning naming the refusal, then the HF fallback" \
  hybrid_engine_refused
check dist_probe "rl/engine/dist.py on a one-rank process group (checks in dist_probe.json)" collectives_on_the_gpu
check offload "train.py --offload --dtype auto, ZeRO-3, 2 steps (the optimizer on the CPU)" offload_two_steps
check lora_gc "train.py --lora_r 4 --gradient_checkpointing, ZeRO-3 ($DTYPE), beta 0.05, 2 steps" \
  lora_checkpointing_two_steps
check eval "eval.py on the tiny Llama, one process: 8 problems x 2 samples x 2 turns" eval_on_the_gpu
check tcpo "train.py --algo tcpo --max_turns 3 --episode_end max_turns, ZeRO-3 ($DTYPE), 2 steps" tcpo_two_steps
check maestro "train.py --algo maestro --env mixed (Conductor, policy rewards), ZeRO-3 ($DTYPE), 2 steps" \
  maestro_two_steps
check dara "train.py --algo dara --reward_funcs correctness,length, ZeRO-3 ($DTYPE), 2 steps" dara_two_steps
check resume "train.py stopped after step 1 and resumed (--resume auto): step 2 samples as if never stopped" exact_resume
wait
failed=0
for name in "${CHECKS[@]}"; do
  read -r status seconds < "$OUT/$name.status" || status=FAILED
  [ "$status" = ok ] || failed=1
  { echo; echo "## $name: $status (${seconds:-?} s)"; echo; cat "$OUT/$name.what"; echo; echo '```';
    tail -n 25 "$OUT/$name.log" 2>/dev/null; echo '```'; } >> "$REPORT"
done
[ -f "$OUT/dist_probe.json" ] && { echo; echo '```json'; cat "$OUT/dist_probe.json"; echo '```'; } >> "$REPORT"

echo "report: $REPORT"
exit "$failed"
