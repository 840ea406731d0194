#!/usr/bin/env bash
# Issue #60 item 3: how long a warm start lands RL where the seeds' mechanisms can act. One SFT run per env
# (scripts/warm_start.sh, 48 steps of 8 examples, constant LR, an HF export every 8 steps), then the base model and
# every export evaluated on the env's held-out rows, greedy and at the RL sweeps' sampling temperature (4 samples per
# question: a GRPO group).
# Fixed before any run (2026-12-07), the targets and the rule that picks the length:
#   toolcall (DARA): at T = 0.4, tool_correct non-zero in >= 1/3 of 4-sample groups, and the format rate in (0.6, 0.95);
#   mixed (MAESTRO): at T = 0.7, the boxed-format rate in (0.6, 0.95).
#   The warm start is the shortest export that meets its env's targets; if none does, the report says so and names
#   the export nearest to them (no target is moved after seeing the numbers).
# Revision 1 (2026-12-07 05:52 UTC, before any eval had finished or been read): the shared machine trained the toolcall
# SFT at about 2 min per step, so it stops at the first export that meets its target, or after step 32 at the latest;
# the pick rule above is unchanged (it never looks past the shortest export that meets, so stopping there changes no
# pick). The mixed sweep runs beside it with one thread.
# Revision 2 (06:15 UTC, after reading mixed's first export): mixed's step-8 export already wrote the boxed format in
# 998 of 1000 sampled responses at T = 0.7, above the band, so its later exports (16-48) were not evaluated and a finer
# grid was run instead: the same recipe stopped at 6 steps with exports at 2, 4 and 6 (constant LR and the same data
# order, so these are the 48-step run's own states at those steps), evaluated with the same flags; target and rule
# unchanged, over all of mixed's evaluated exports. `FINE=1 ENVS=mixed` runs it.
# Revision 3 (06:33 UTC, after reading the fine grid): mixed's format went from 0.525 (step 4) to 0.970 (step 6) at
# T = 0.7, both outside the band, so step 5 is evaluated too (the same recipe stopped at 5 steps: FINE=5); the rule
# then picks over steps 2, 4, 5, 6 and 8. The warm start is an instrument whose length the issue asks to choose so that
# RL has room; no RL result has been seen.
# Revision 4 (session 29, 2026-12-07 07:58 UTC, before any new run): revision 1 had stopped toolcall at step 24 (the
# loaded machine), short of the original 48-step plan, with no export meeting the target. On a quiet machine the same
# recipe now runs the original 48 steps (the first run's step-8..24 exports and evals are kept as toolcall/sft_rev1 and
# toolcall/eval; the new run's step-24 export is compared with the first's to show the rerun is the same model), and
# the evals still missing are run in the script's order (step_8 sampled, then 32, 40, 48). Targets and the pick rule
# are unchanged. The rerun's step-8, 16 and 24 exports are byte-identical to the first run's (md5 of model.safetensors),
# so the earlier evals stand for them. Its evals ran with one thread (OMP_NUM_THREADS=1, the other core kept for other
# work), where the first run's had two: the sampled draws are the same seeds, any difference is floating-point order.
# Checked after the pick: `OUT=/tmp/ws_rebuild bash scripts/warm_start.sh toolcall` (40 steps, from scratch) writes a
# final/model.safetensors byte-identical to this run's hf/step_40 (md5 311a8b66...), so the recipe rebuilds the pick;
# its tokenizer.json differs only in the padding/truncation state the end-of-run eval left on the tokenizer.
# Resumable: a finished SFT (sft/final) and every results.json are kept and skipped on a rerun.
#   bash experiments/sweeps/warm_start.sh            # both envs: about 1.5 h of 2 cores
#   ENVS=toolcall bash experiments/sweeps/warm_start.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
. .venv/bin/activate
MODEL=${MODEL:-.cache/models/SmolLM2-135M-Instruct}
ROOT=${ROOT:-output/warm_start_sweep}
for env in ${ENVS:-toolcall mixed}; do
  OUT=$ROOT/$env
  case "$env" in
    toolcall) DATA="--env toolcall --toolcall_categories simple_python,multiple,parallel,parallel_multiple --toolcall_max_schema_chars 1200 --no-toolcall_example"
              EVAL="$DATA --max_new_tokens 96 --batch_size 20 --dtype fp32"; GREEDY_LIMIT=60; SAMPLED_LIMIT=60; T=0.4 ;;
    mixed)    EVAL="--env mixed --max_new_tokens 48 --batch_size 100 --dtype fp32"; GREEDY_LIMIT=200; SAMPLED_LIMIT=100; T=0.7 ;;
    *) echo "ENVS: toolcall and/or mixed, got '$env'" >&2; exit 2 ;;
  esac
  if [ "${FINE:-0}" = 5 ]; then  # revision 3: step 5
    OUT=$ROOT/${env}_step5
    [ -d "$OUT/sft/final" ] || STEPS=5 OUT=$OUT MODEL=$MODEL bash scripts/warm_start.sh "$env"
    models="step_5=$OUT/sft/final"
  elif [ "${FINE:-0}" = 1 ]; then  # revision 2's finer grid
    OUT=$ROOT/${env}_fine
    [ -d "$OUT/sft/final" ] || STEPS=6 SAVE_EVERY=2 OUT=$OUT MODEL=$MODEL bash scripts/warm_start.sh "$env"
    models="step_2=$OUT/sft/hf/step_2 step_4=$OUT/sft/hf/step_4 step_6=$OUT/sft/final"
  else
    [ -d "$OUT/sft/final" ] || STEPS=48 SAVE_EVERY=8 OUT=$OUT MODEL=$MODEL bash scripts/warm_start.sh "$env"
    models="base=$MODEL"
    for s in 8 16 24 32 40; do models="$models step_$s=$OUT/sft/hf/step_$s"; done
    models="$models step_48=$OUT/sft/final"
  fi
  for pair in $models; do
    name=${pair%%=*}; path=${pair#*=}
    # shellcheck disable=SC2086
    [ -f "$OUT/eval/${name}_greedy/results.json" ] || python eval.py --model_name_or_path "$path" $EVAL \
        --limit "$GREEDY_LIMIT" --output_dir "$OUT/eval/${name}_greedy"
    # shellcheck disable=SC2086
    [ -f "$OUT/eval/${name}_sampled/results.json" ] || python eval.py --model_name_or_path "$path" $EVAL \
        --limit "$SAMPLED_LIMIT" --n 4 --k 1,4 --temperature "$T" --seed 0 --output_dir "$OUT/eval/${name}_sampled"
  done
done
python experiments/warm_start_report.py "$ROOT" --output experiments/results/warm_start.md
