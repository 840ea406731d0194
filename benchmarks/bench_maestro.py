"""MAESTRO's cost on the CPU default: the Conductor's share of a step, the policy-computed rewards' share, and the
step time against GRPO on the same task, batch and seed (ratio measured in the same invocation).

Both runs are `train.py` under the real `deepspeed` launcher (1 rank, ZeRO-3) on `--env mixed` (arithmetic +
short descriptions) with SmolLM2-135M-Instruct. The first step (warm-up) is left out of the means.

    .venv/bin/python benchmarks/bench_maestro.py --steps 6
"""
import argparse
import json
import os
import platform
import subprocess
import sys

from rl.log.loggers import read_metrics

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RUNS = {
    "grpo": ["--algo", "grpo"],
    "maestro": ["--algo", "maestro", "--maestro_update_interval", "1"],  # a meta-update every step: the worst case
}


def mean(values):
    return sum(values) / len(values)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--out", default=os.path.join(REPO, "output", "bench_maestro"))
    p.add_argument("--results", default=os.path.join(REPO, "benchmarks", "results", "maestro_overhead"))
    a = p.parse_args()
    deepspeed = os.path.join(os.path.dirname(sys.executable), "deepspeed")
    summary = {}
    for name, flags in RUNS.items():
        out = os.path.join(a.out, name)
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "train.log"), "w") as log:
            subprocess.run([deepspeed, "--num_gpus", "1", "--master_port", "29541", "train.py", *flags, "--env", "mixed",
                            "--dtype", a.dtype, "--max_steps", str(a.steps), "--max_answer_seq_len", "48",
                            "--len_min", "16", "--len_max", "48", "--resume", "none", "--no_final_export",
                            "--output_dir", out], cwd=REPO, stdout=log, stderr=subprocess.STDOUT, check=True,
                           env=dict(os.environ, OMP_NUM_THREADS=str(os.cpu_count())))
        rows = read_metrics(os.path.join(out, "metrics.jsonl"))[1:]
        summary[name] = {"step_seconds": mean([r["time/step"] for r in rows]),
                         "phases": {k[len("time/"):]: mean([r[k] for r in rows]) for k in rows[0] if k.startswith("time/")}}
        if name == "maestro":
            summary[name]["conductor_share"] = mean([r["time_share/conductor"] for r in rows])
            summary[name]["maestro_rewards_share"] = mean([r["time_share/policy_rewards"] for r in rows])
    ratio = summary["maestro"]["step_seconds"] / summary["grpo"]["step_seconds"]
    result = {"runs": summary, "maestro_over_grpo": ratio, "config": vars(a),
              "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
              "command": "python benchmarks/bench_maestro.py " + " ".join(sys.argv[1:])}
    os.makedirs(os.path.dirname(a.results), exist_ok=True)
    with open(a.results + ".json", "w") as f:
        json.dump(result, f, indent=1)
    m = summary["maestro"]
    lines = [f"MAESTRO cost, `{result['command']}` ({os.cpu_count()} CPU cores, {a.dtype}, SmolLM2-135M-Instruct, "
             f"--env mixed, 8 prompts x 4 responses, <= 48 new tokens; steps 2..{a.steps}).", "",
             "| | s/step | Conductor share (head + sampling + REINFORCE) | ppl/ent/h forwards share |",
             "|---|---|---|---|",
             f"| grpo | {summary['grpo']['step_seconds']:.1f} | | |",
             f"| maestro | {m['step_seconds']:.1f} | {100 * m['conductor_share']:.2f}% | {100 * m['maestro_rewards_share']:.1f}% |",
             "", f"maestro / grpo step time: {ratio:.2f}x (paper: Conductor +4 to 7%)."]
    with open(a.results + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
