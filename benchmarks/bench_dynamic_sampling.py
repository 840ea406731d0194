"""The cost of DAPO's dynamic sampling (--filter_groups) on the CPU default: rollout rounds per step, groups
dropped, and the step time against the same run without it (ratio measured in the same invocation).

Both runs are `train.py` under the real `deepspeed` launcher (1 rank, ZeRO-3) on `--env arith` with
SmolLM2-135M-Instruct, --prompts prompts x 4 responses per step, the same seed. The first step (warm-up) is left out of the
time means; rounds are counted over every step.

    nice -n 10 .venv/bin/python benchmarks/bench_dynamic_sampling.py --steps 4
"""
import argparse
import json
import os
import subprocess
import sys

from benchmarks.ports import free_port
from benchmarks.results_io import cpu_model, write_results
from rl.engine.hardware import cpu_bf16_matmul_isa
from rl.log.loggers import read_metrics

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNS = {"off": [], "filter_groups": ["--filter_groups", "--filter_groups_max_rounds", "0"]}


def mean(values):
    values = list(values)
    return sum(values) / len(values)


def load_average() -> float:
    return os.getloadavg()[0]


def run(name, flags, a):
    out = os.path.join(a.out, name)
    os.makedirs(out, exist_ok=True)
    if not a.summarize:
        train(out, flags, a)
    return summarize(read_metrics(os.path.join(out, "metrics.jsonl")))


def train(out, flags, a):
    deepspeed = os.path.join(os.path.dirname(sys.executable), "deepspeed")
    with open(os.path.join(out, "train.log"), "w") as log:
        subprocess.run([deepspeed, "--num_gpus", "1", "--master_port", str(free_port()), "train.py", *flags,
                        "--env", "arith", "--dtype", a.dtype, "--per_device_generation_batch_size", str(a.prompts),
                        "--max_answer_seq_len", str(a.max_new_tokens), "--max_steps", str(a.steps), "--resume", "none",
                        "--no_final_export", "--save_steps", "0", "--seed", str(a.seed), "--output_dir", out],
                       cwd=REPO, stdout=log, stderr=subprocess.STDOUT, check=True,
                       env=dict(os.environ, OMP_NUM_THREADS=str(os.cpu_count())))


def summarize(rows):
    """The logged steps of one run (all of them when the run was stopped early: --summarize)."""
    if not rows:
        return {"steps_completed": 0}
    timed = rows[1:] or rows
    return {"steps_completed": len(rows),
            "step_seconds": mean(r["time/step"] for r in timed),
            "generate_seconds": mean(r["time/generate"] for r in timed),
            "train_seconds": mean(r["time/train"] for r in timed),
            "rounds_per_step": [r.get("filter_groups/rounds", 1.0) for r in rows],
            "frac_zero_std_groups": [r["frac_zero_std_groups"] for r in rows],
            "dropped_groups": [r.get("filter_groups/dropped_groups", 0.0) for r in rows]}


def report(r) -> str:
    off, on = r["runs"]["off"], r["runs"]["filter_groups"]
    rounds = on["rounds_per_step"]
    return "\n".join([
        f"DAPO dynamic sampling cost, `{r['command']}` ({r['machine']['cpu']}, {r['machine']['cores']} cores, bf16 "
        f"matmul: {r['machine']['bf16_isa'] or 'none'}; --dtype {r['config']['dtype']}; load average "
        f"{r['load_average'][0]:.1f} before, {r['load_average'][1]:.1f} after, on a machine shared with other jobs). "
        f"SmolLM2-135M-Instruct, --env arith, {r['config']['prompts']} prompts x 4 responses, <= "
        f"{r['config']['max_new_tokens']} new tokens, {r['config']['steps']} steps "
        f"(time means over steps 2..{r['config']['steps']}; steps logged: off {off['steps_completed']}, --filter_groups "
        f"{on['steps_completed']}).", "",
        "| | s/step | generate s/step | train s/step | rollout rounds per step | zero-spread groups drawn |",
        "|---|---|---|---|---|---|",
        f"| off | {off['step_seconds']:.1f} | {off['generate_seconds']:.1f} | {off['train_seconds']:.1f} | 1 | "
        f"{mean(off['frac_zero_std_groups']):.0%} of the batch (trained on) |",
        f"| --filter_groups | {on['step_seconds']:.1f} | {on['generate_seconds']:.1f} | {on['train_seconds']:.1f} | "
        f"{mean(rounds):.2f} ({', '.join(f'{x:g}' for x in rounds)}) | {int(sum(on['dropped_groups']))} dropped, "
        f"{mean(on['frac_zero_std_groups']):.0%} of the batch |", "",
        f"--filter_groups / off step time: {r['ratio']:.2f}x; extra rollout rounds per step: {mean(rounds) - 1:.2f}.",
        ""])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--prompts", type=int, default=8, help="prompts per step (--per_device_generation_batch_size)")
    p.add_argument("--max_new_tokens", type=int, default=32, help="--max_answer_seq_len")
    p.add_argument("--summarize", action="store_true",
                   help="train nothing: report the steps the runs in --out logged (a run stopped before its end)")
    p.add_argument("--out", default=os.path.join(REPO, "output", "bench_dynamic_sampling"))
    p.add_argument("--results", default=os.path.join(REPO, "benchmarks", "results", "dynamic_sampling"))
    a = p.parse_args()
    before = load_average()
    runs = {name: run(name, flags, a) for name, flags in RUNS.items()}
    both = all(run.get("steps_completed") for run in runs.values())
    result = {"runs": runs, "ratio": runs["filter_groups"]["step_seconds"] / runs["off"]["step_seconds"] if both else None,
              "config": vars(a), "load_average": [before, load_average()],
              "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "bf16_isa": cpu_bf16_matmul_isa()},
              "command": "python benchmarks/bench_dynamic_sampling.py " + " ".join(sys.argv[1:])}
    write_results(result, a.results, report if both else lambda r: json.dumps(r, indent=1) + "\n")


if __name__ == "__main__":
    main()
