#!/usr/bin/env bash
# Issue #61 item 4: DARA's six-method set (GDPO, DARA-Asym, DARA-Sym, DVAO, GD²PO-Hard, GRPO) from the toolcall warm
# start, on tool_format + tool_correct (sweep dara_six_warm) and with think_length added (dara_six_warm_think, Table
# 2's setting), 3 paired seeds each. Design, deciding metric and sizing fixed before any run:
# experiments/results/dara_six_warm.preregistration.md. Revision 1 (before any run of the sweep proper): 8 prompts per
# step, where DARA's weights can move in about a third of the steps (7% at 4: experiments/dara_weight_check.py).
#   bash experiments/sweeps/dara_six_warm.sh [--plan | --partial]   # both sweeps, 36 runs: about 12 h of 2 cores
#   SWEEPS=think bash experiments/sweeps/dara_six_warm.sh           # one sweep only (plain | think)
# The warm start is rebuilt from a fresh clone first when missing (scripts/warm_start.sh toolcall, a few minutes on
# idle cores). Resumable: finished runs are cached (output/compare/) and archived (experiments/results/archive/<sweep>,
# packed); a killed run continues from its latest checkpoint (every 5 steps).
set -euo pipefail
cd "$(dirname "$0")/../.."
. .venv/bin/activate
WARM=${WARM:-output/warm_start/toolcall/sft/final}
[ -d "$WARM" ] || [ "${1:-}" = --plan ] || bash scripts/warm_start.sh toolcall
# The warm start's data and prompt: BFCL's four non-live Python categories, schemas <= 1,200 characters, ToolRL's and
# DARA's prompt without worked examples (the warm start taught the layout).
DATA="--env toolcall --toolcall_categories simple_python,multiple,parallel,parallel_multiple --toolcall_max_schema_chars 1200 --no-toolcall_example"
TRAIN="$DATA --model_name_or_path $WARM --max_steps 16 --per_device_generation_batch_size 8 --num_generations 4 --max_answer_seq_len 96 --temperature 0.4 --actor_learning_rate 2e-5 --beta 0 --actor_zero_stage 0 --dtype fp32 --save_steps 5"
EVAL="$DATA --limit 60 --max_new_tokens 96 --batch_size 20 --dtype fp32"
for sweep in ${SWEEPS:-plain think}; do
  case "$sweep" in
    plain) NAME=dara_six_warm REWARDS=tool_format,tool_correct ;;
    think) NAME=dara_six_warm_think REWARDS=tool_format,tool_correct,think_length ;;
    *) echo "SWEEPS: plain and/or think, got '$sweep'" >&2; exit 2 ;;
  esac
  python experiments/compare.py --name "$NAME" --seeds 1,2,3 --cache_dir "output/compare/$NAME" \
    --method gdpo="--algo gdpo" --method dara-asym="--algo dara --dara_variant asym" \
    --method dara-sym="--algo dara --dara_variant sym" --method dvao="--algo dvao" \
    --method gd2po-hard="--algo gd2po_hard" --method grpo="--algo grpo" \
    --train_args "$TRAIN --reward_funcs $REWARDS" \
    --metric mean_last:reward/tool_correct/mean:4 \
    --also "eval:toolcall/Avg Accuracy" --also "eval:toolcall/Avg Format" \
    --also first_step:reward/tool_format/mean:0.8:3 --also mean_last:reward/tool_format/mean:4 \
    --eval_args "$EVAL" \
    --archive "experiments/results/archive/$NAME" --results "experiments/results/$NAME" "$@"
done
