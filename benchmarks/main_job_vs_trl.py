"""The main job against TRL's GRPOTrainer in one invocation: the same prompts, the same held-out eval, the same
wall-clock budget, over the same seeds (issue #41 item 2).

    python benchmarks/main_job_vs_trl.py --seeds 1,2,3             # runs what is missing, then reports
    python benchmarks/main_job_vs_trl.py --seeds 1,2,3 --report     # runs nothing; reports from the archive

Per seed s, in this order:
1. credo: `SEED=s OUTPUT=ROOT/credo/seed_s bash scripts/train.sh`, the user's command unchanged (every setting at
   its default); its training phase's wall time T_s (launcher start to exit: start-up, steps, checkpoint, export) is
   scripts/train.sh's OUTPUT/train_wall.json.
2. TRL: benchmarks/trl_main_job.py with the same recipe and seed and a budget of T_s seconds of training (its
   model loading before the budget starts is not counted against it), then the same eval.py call as
   scripts/train.sh's final evaluation on its saved model.
The initial accuracy is the base model's greedy accuracy, the same for both and every seed (scripts/train.sh's
eval_initial of the first seed).

Deciding quantity, fixed before the runs: the paired gain difference credo - TRL (final - initial greedy pass@1 on
200 held-out prompts), mean over seeds +- SE over seeds; each gain's mean +- SE and each eval's binomial SE beside
it. Time: credo's training wall time against the 8-minute target, and each runner's seconds per step.
A seed's run is done once its final results.json exists (an interrupted sweep continues with the next missing run);
slim records go to benchmarks/results/archive/main_job_vs_trl/, which git keeps packed as main_job_vs_trl.tar.gz
(benchmarks/archive_pack.py).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks.archive_pack import pack, unpacked  # noqa: E402
from benchmarks.main_job_seeds import archive, binomial_se, read_seed, run_seed  # noqa: E402
from benchmarks.paired import paired  # noqa: E402
from benchmarks.results_io import write_results  # noqa: E402

DECIDING = ("paired gain difference credo - TRL in greedy held-out pass@1 (final - initial, 200 prompts), "
            "mean over seeds +- SE over seeds")


def shell_default(name: str) -> str:
    """scripts/train.sh's default for one of its settings (`NAME=${NAME:-value}`), so TRL gets the same recipe."""
    import re
    with open(os.path.join(REPO, "scripts", "train.sh")) as f:
        match = re.search(rf"^{name}=\$\{{{name}:-([^}}]*)\}}", f.read(), re.M)
    if not match:
        raise SystemExit(f"main_job_vs_trl: scripts/train.sh has no default for {name}")
    return os.environ.get(name, match.group(1))


def run_trl(seed: int, budget_s: float, output: str, initial_eval: str):
    if os.path.exists(output):
        shutil.rmtree(output)
    os.makedirs(output)
    threads = str(os.cpu_count())
    cmd = [sys.executable, os.path.join(REPO, "benchmarks", "trl_main_job.py"), "--seed", str(seed),
           "--time_budget_s", f"{budget_s:.1f}", "--output_dir", output, "--threads", threads,
           "--prompts", shell_default("PROMPTS_PER_RANK"), "--num_generations", shell_default("NUM_GENERATIONS"),
           "--max_completion_length", shell_default("MAX_NEW_TOKENS"), "--temperature", shell_default("TEMPERATURE"),
           "--learning_rate", shell_default("LR")]
    env = dict(os.environ, OMP_NUM_THREADS=threads, TOKENIZERS_PARALLELISM="false")
    with open(os.path.join(output, "training.log"), "w") as log:
        if subprocess.run(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT).returncode != 0:
            sys.exit(f"main_job_vs_trl: TRL failed for seed {seed}; log: {output}/training.log")
        # the same evaluation as scripts/train.sh's final one (its flags, its dtype rule)
        evaluate = [sys.executable, "eval.py", "--model_name_or_path", os.path.join(output, "final"), "--env", "arith",
                    "--limit", shell_default("EVAL_SAMPLES"), "--max_new_tokens", shell_default("MAX_NEW_TOKENS"),
                    "--dtype", shell_default("DTYPE"), "--batch_size", "100", "--output_dir",
                    os.path.join(output, "eval_final"), "--label", "final accuracy"]
        if subprocess.run(evaluate, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT).returncode != 0:
            sys.exit(f"main_job_vs_trl: eval of TRL's model failed for seed {seed}; log: {output}/training.log")
    os.makedirs(os.path.join(output, "eval_initial"), exist_ok=True)
    shutil.copyfile(initial_eval, os.path.join(output, "eval_initial", "results.json"))


def read_trl(run_dir: str) -> dict:
    with open(os.path.join(run_dir, "trl_run.json")) as f:
        run = json.load(f)
    with open(os.path.join(run_dir, "eval_initial", "results.json")) as f:
        initial = json.load(f)
    with open(os.path.join(run_dir, "eval_final", "results.json")) as f:
        final = json.load(f)
    records = run["records"]
    return {"initial": initial["metrics"]["pass@1"], "final": final["metrics"]["pass@1"],
            "gain": final["metrics"]["pass@1"] - initial["metrics"]["pass@1"], "eval_n": final["config"]["limit"],
            "steps": run["steps"], "train_seconds": run["train_seconds"],
            "seconds_per_step": sum(r["seconds"] for r in records) / max(len(records), 1),
            "budget_s": run["config"]["time_budget_s"], "versions": run["versions"]}


def archive_trl(output: str, target: str):
    for name in ("trl_run.json", os.path.join("eval_initial", "results.json"), os.path.join("eval_final", "results.json")):
        os.makedirs(os.path.dirname(os.path.join(target, name)), exist_ok=True)
        with open(os.path.join(output, name)) as f:
            data = json.load(f)
        if name.endswith("results.json"):
            data = {k: v for k, v in data.items() if k != "problems"}
        with open(os.path.join(target, name), "w") as g:
            json.dump(data, g, indent=1)


def credo_train_seconds(run_dir: str) -> float:
    with open(os.path.join(run_dir, "train_wall.json")) as f:
        return json.load(f)["train_wall_seconds"]


def summarize(seeds, runs_dir: str, probe: dict) -> dict:
    credo = {s: dict(read_seed(os.path.join(runs_dir, "credo", f"seed_{s}")),
                     train_seconds=credo_train_seconds(os.path.join(runs_dir, "credo", f"seed_{s}"))) for s in seeds}
    trl = {s: read_trl(os.path.join(runs_dir, "trl", f"seed_{s}")) for s in seeds}
    gain = {name: paired([runs[s]["gain"] for s in seeds], [0.0] * len(seeds)) for name, runs in
            (("credo", credo), ("trl", trl))}
    return {"name": "main_job_vs_trl", "deciding": DECIDING, "seeds": list(seeds), "credo": credo, "trl": trl,
            "gain": gain, "credo_minus_trl": paired([credo[s]["gain"] for s in seeds], [trl[s]["gain"] for s in seeds]),
            "probe": probe, "load_average": os.getloadavg(),
            "recipe": {k: shell_default(k) for k in ("MAX_STEPS", "LR", "PROMPTS_PER_RANK", "NUM_GENERATIONS",
                                                     "MAX_NEW_TOKENS", "TEMPERATURE", "DTYPE", "EVAL_SAMPLES")}}


def report(r: dict) -> str:
    p = r["probe"]
    lines = [
        "# The main job against TRL's GRPOTrainer, same prompts, eval and wall-clock budget\n",
        "Command: `python benchmarks/main_job_vs_trl.py --seeds " + ",".join(map(str, r["seeds"])) + "` (credo: "
        "`SEED=s bash scripts/train.sh` at its defaults; TRL: benchmarks/trl_main_job.py with the same recipe and "
        "credo's training wall time as its budget; both evaluated by the same eval.py call).\n",
        f"Machine: {p['cpu']}, {p['threads']} threads, bf16 ISA {p['bf16_isa']}; matmul probe in this invocation: "
        f"fp32 {p['fp32_gflops']:.1f} GFLOP/s, bf16 {p['bf16_gflops']:.1f} GFLOP/s ({p['bf16_speedup']:.2f}x); "
        f"load average at report time {r['load_average'][0]:.1f}. Recipe: {r['recipe']}.\n",
        f"Deciding quantity (fixed before the runs): {r['deciding']}.\n",
        "| seed | runner | initial | final | gain | steps | train s | s/step |", "|---|---|---|---|---|---|---|---|"]
    for s in r["seeds"]:
        for name in ("credo", "trl"):
            x = r[name][s] if s in r[name] else r[name][str(s)]
            lines.append(f"| {s} | {name} | {x['initial']:.3f} | {x['final']:.3f} ± "
                         f"{binomial_se(x['final'], x['eval_n']):.3f} | {x['gain']:+.3f} | {x['steps']} | "
                         f"{x['train_seconds']:.0f} | {x['seconds_per_step']:.1f} |")
    g, d = r["gain"], r["credo_minus_trl"]
    lines += ["", f"Gain, mean ± SE over {d['n']} seeds: credo {g['credo']['mean_diff']:+.3f} ± "
              f"{g['credo']['se_diff']:.3f}, TRL {g['trl']['mean_diff']:+.3f} ± {g['trl']['se_diff']:.3f}.",
              f"Paired credo - TRL: {d['mean_diff']:+.3f} ± {d['se_diff']:.3f} (95% bootstrap CI [{d['ci_low']:+.3f}, "
              f"{d['ci_high']:+.3f}]); credo higher on {d['a_higher']} of {d['n']} seeds."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="1,2,3", help="comma list of seeds (default 1,2,3)")
    p.add_argument("--output_root", default=os.path.join(REPO, "output", "main_job_vs_trl"))
    p.add_argument("--runs_dir", default=os.path.join(REPO, "benchmarks", "results", "archive", "main_job_vs_trl"),
                   help="slim records, committed")
    p.add_argument("--report", action="store_true", help="run nothing; report from --runs_dir")
    p.add_argument("--results", default=os.path.join(REPO, "benchmarks", "results", "main_job_vs_trl"))
    a = p.parse_args(argv)
    seeds = [int(s) for s in a.seeds.split(",")]
    from rl.engine.hardware import probe_bf16
    probe = probe_bf16(seconds=0.5)  # in this invocation, beside the runs (issue #41 item 3)
    unpacked(a.runs_dir)
    if a.report:
        with open(a.results + ".json") as f:
            probe = json.load(f)["probe"]
    else:
        for s in seeds:
            credo_out = os.path.join(a.output_root, "credo", f"seed_{s}")
            if not os.path.exists(os.path.join(credo_out, "eval_final", "results.json")):
                print(f"main_job_vs_trl: seed {s}: credo ({credo_out})", flush=True)
                run_seed(s, credo_out)
            archive(credo_out, os.path.join(a.runs_dir, "credo", f"seed_{s}"))
            shutil.copyfile(os.path.join(credo_out, "train_wall.json"),
                            os.path.join(a.runs_dir, "credo", f"seed_{s}", "train_wall.json"))
            trl_out = os.path.join(a.output_root, "trl", f"seed_{s}")
            if not os.path.exists(os.path.join(trl_out, "eval_final", "results.json")):
                print(f"main_job_vs_trl: seed {s}: TRL ({trl_out})", flush=True)
                started = time.time()
                run_trl(s, credo_train_seconds(credo_out), trl_out,
                        os.path.join(credo_out, "eval_initial", "results.json"))
                print(f"main_job_vs_trl: seed {s}: TRL done in {time.time() - started:.0f} s", flush=True)
            archive_trl(trl_out, os.path.join(a.runs_dir, "trl", f"seed_{s}"))
            pack(a.runs_dir)
    write_results(summarize(seeds, a.runs_dir, probe), a.results, report)


if __name__ == "__main__":
    main()
