#!/usr/bin/env bash
# The maestro_meta_reward testbed's logged runs (issue #42's design, experiments/README.md "Why the Conductor ends on
# `len`" and "The centred meta-reward"): the Conductor arm of the MAESTRO sweep, seeds 1-3, every row logged
# (--log_completions 32), with the default (advantage) meta-reward and with --maestro_meta_reward centred; then the
# testbed's analysis of each run and its summary per arm. Issue #49 item 1 reruns it at MAESTRO's `ent` sign:
#   bash experiments/sweeps/maestro_meta_reward.sh            # ARCHIVE=maestro_meta_reward_entsign (default)
# Resumable: a run that reached step 40 is archived (completions.jsonl.gz, config.json, metrics.jsonl) and skipped
# next time; a killed run continues from its latest checkpoint (every 10 steps) in output/meta_reward/<archive>/.
# The archive is committed as experiments/results/archive/<archive>.tar.gz (benchmarks/archive_pack.py).
# About 10-12 min a run on 2 idle cores; 6 runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
. .venv/bin/activate
ARCHIVE=${ARCHIVE:-maestro_meta_reward_entsign}
SEEDS=${SEEDS:-1 2 3}
ARMS=${ARMS:-conductor centred}
STEPS=40
python -m benchmarks.archive_pack unpack "experiments/results/archive/$ARCHIVE" >/dev/null  # its runs count as done
for arm in $ARMS; do
  for seed in $SEEDS; do
    name=${arm}_seed$seed
    keep=experiments/results/archive/$ARCHIVE/$name
    if [ -f "$keep/metrics.jsonl" ]; then echo "meta_reward: $name archived, skipped"; continue; fi
    out=output/meta_reward/$ARCHIVE/$name
    extra=""; tag=""  # an `[ ] && ...` whose test fails would end the script under set -e in an assignment
    if [ "$arm" = centred ]; then extra="--maestro_meta_reward centred"; tag=centred_; fi
    echo "meta_reward: $name -> $out"
    # shellcheck disable=SC2086
    deepspeed --num_gpus 1 train.py --env mixed --model_name_or_path .cache/models/SmolLM2-135M-Instruct \
      --max_steps $STEPS --per_device_generation_batch_size 8 --num_generations 4 --max_answer_seq_len 48 \
      --temperature 0.7 --actor_learning_rate 2e-5 --beta 0 --actor_zero_stage 0 --dtype fp32 \
      --maestro_reward_scale batch_rank --algo maestro --maestro_weights conductor --maestro_recipe small \
      --seed "$seed" --scale_rewards group --log_completions 32 --save_steps 10 --no_final_export \
      --output_dir "$out" $extra
    last=$(python -c "import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])['step'])" \
      "$out/metrics.jsonl")
    [ "$last" = "$STEPS" ] || { echo "meta_reward: $name stopped at step $last; run again to continue" >&2; exit 1; }
    mkdir -p "$keep"
    gzip -c "$out/completions.jsonl" > "$keep/completions.jsonl.gz"
    cp "$out/config.json" "$out/metrics.jsonl" "$keep/"
    python -m benchmarks.archive_pack pack "experiments/results/archive/$ARCHIVE" >/dev/null
    result=experiments/results/mechanisms_${ARCHIVE}_${tag}seed$seed
    python -m experiments.mechanisms.maestro_meta_reward "$keep" --results "$result"
  done
done
