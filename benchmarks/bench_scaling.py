"""How credo's step time grows with group size, response length and number of turns (issue 10's small table).

Each cell is a short train.py run (benchmarks/credo_timed_train.py; 1 rank, train.py's default ZeRO stage unless
--zero_stage) on the single-digit arith task of bench_vs_trl.py, 8 prompts per step, fp32; one factor varies from the base cell (G 4,
48 new tokens, 1 turn). Multi-turn cells are trajectory GRPO with --max_turns (a wrong answer gets feedback and another try).
The tcpo_cf cells measure TCPO's counterfactual overhead (paper: 1.03 to 1.05x): --algo tcpo over 3 turns with
--tcpo_cf_budget 0 (none) and 5 (the default); the ratio of their step times is the overhead, and
tcpo/cf_time_share is the trainer's own share of the step spent on counterfactuals.
The maestro cells measure MAESTRO's policy-computed rewards (issue 21: at most 1.05x): --algo gdpo over
correctness, format and length_linear (worker-pool rewards, no policy forward) against --algo maestro over
correctness, fmt, ppl, ent and len (the same three plus NOVER's ppl and the entropy reward, a Conductor update
every step); the ratio of their step times is the overhead, and time/policy_rewards its in-step share.
The first step of each cell is warm-up and is left out.

    .venv/bin/python benchmarks/bench_scaling.py --steps 4
    .venv/bin/python benchmarks/bench_scaling.py --steps 2 --cells turns=2      # one cell (smoke test)
    .venv/bin/python benchmarks/bench_scaling.py --steps 4 --cells tcpo_cf=0,tcpo_cf=5,maestro=0,maestro=1
"""
import argparse
import os
import sys
import time

from benchmarks.results_io import write_results
from benchmarks.bench_vs_trl import MODEL, PROMPTS, machine_info, run_credo, summarise

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BASE = {"group": 4, "max_new": 48, "turns": 1, "tcpo_cf": None, "maestro": None}
FACTORS = {"group": (2, 4, 8), "max_new": (16, 32, 48), "turns": (1, 2, 3), "tcpo_cf": (0, 5), "maestro": (0, 1)}
TCPO_TURNS = 3
# maestro=0: GDPO on rewards without a policy forward; maestro=1: MAESTRO on those and ppl, ent (module docstring)
MAESTRO_CELLS = {
    0: ["--algo", "gdpo", "--reward_funcs", "correctness,format,length_linear"],
    1: ["--algo", "maestro", "--maestro_rewards", "correctness,fmt,ppl,ent,len", "--maestro_update_interval", "1"],
}


def cells(selection: str) -> list:
    """[(factor, value)]: every factor's values, or the comma list FACTOR=VALUE given."""
    if selection:
        out = []
        for item in selection.split(","):
            factor, _, value = item.partition("=")
            if factor not in FACTORS:
                raise SystemExit(f"--cells: unknown factor {factor!r}; choose from {sorted(FACTORS)}")
            out.append((factor, int(value)))
        return out
    return [(f, v) for f, values in FACTORS.items() for v in values]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=4, help="steps per cell; the first is warm-up")
    p.add_argument("--cells", default="",
                   help="comma list of FACTOR=VALUE (group, max_new, turns, tcpo_cf, maestro); default all")
    p.add_argument("--ranks", type=int, default=1)
    p.add_argument("--zero_stage", type=int, choices=(0, 1, 2, 3), default=None,
                   help="--actor_zero_stage of every cell (default: train.py's, 0 in one process, 3 on several ranks)")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--model", default=MODEL, help="HF model folder (another than the default only for smoke tests)")
    p.add_argument("--out", default=os.path.join(REPO, "output", "bench_scaling"))
    p.add_argument("--results", default=os.path.join(REPO, "benchmarks", "results", "scaling"))
    a = p.parse_args()
    if a.steps < 2:
        p.error("--steps must be >= 2 (the first step is warm-up)")
    machine = machine_info()
    rows, done = [], {}
    for factor, value in cells(a.cells):
        cfg = dict(BASE, **{factor: value})
        extra = ["--max_turns", str(cfg["turns"])]
        if cfg["tcpo_cf"] is not None:
            cfg["turns"] = TCPO_TURNS
            extra = ["--max_turns", str(TCPO_TURNS), "--algo", "tcpo", "--tcpo_cf_budget", str(cfg["tcpo_cf"])]
        if cfg["maestro"] is not None:
            extra = extra + MAESTRO_CELLS[cfg["maestro"]]
        key = (cfg["group"], cfg["max_new"], cfg["turns"], cfg["tcpo_cf"], cfg["maestro"])
        if key not in done:  # the base cell appears once per factor: run it once
            name = f"g{key[0]}_len{key[1]}_t{key[2]}" + ("" if key[3] is None else f"_tcpo_cf{key[3]}") + \
                ("" if key[4] is None else ("_maestro" if key[4] else "_gdpo"))
            run = run_credo(os.path.join(a.out, name), a.steps, a.seed, a.ranks, max(1, a.threads // a.ranks),
                            PROMPTS // a.ranks, extra=extra, zero_stage=a.zero_stage, max_new=cfg["max_new"],
                            group=cfg["group"], model=a.model)
            done[key] = {"config": cfg, "summary": summarise(run), "command": run["command"]}
            s = done[key]["summary"]
            print(f"{name}: {s['s_per_step']:.2f} s/step, {s['tokens_per_step']:.0f} tokens/step", flush=True)
        rows.append({"factor": factor, "value": value, **done[key]})
    machine["loadavg_end"] = os.getloadavg()
    result = {"command": " ".join([os.path.relpath(sys.executable, REPO), *sys.argv]), "machine": machine,
              "date": time.strftime("%Y-%m-%d %H:%M"), "ranks": a.ranks, "zero_stage": a.zero_stage, "steps": a.steps,
              "base": BASE, "rows": rows}
    write_results(result, a.results, report)


def report(r: dict) -> str:
    m = r["machine"]
    stage = r.get("zero_stage", 3) if r.get("zero_stage", 3) is not None else "train.py's default (0 on one rank, 3 on several)"
    lines = [f"# credo step time vs group size, response length, turns ({r['date']})", "",
             f"Command: `{r['command']}`", "",
             f"{m['cpu']}, {m['cores']} cores, {r['ranks']} rank(s), ZeRO stage {stage}, "
             f"load average {m['loadavg_start'][0]:.2f} at start, "
             f"{m['loadavg_end'][0]:.2f} at end; {PROMPTS} prompts per step, fp32, {r['steps'] - 1} measured step(s) "
             f"per cell after one warm-up. Base cell: G {r['base']['group']}, {r['base']['max_new']} new tokens, "
             f"{r['base']['turns']} turn.", "",
             "| factor | value | s/step | generated tokens/step | gather | generate | reward | counterfactual | "
             "policy_rewards | train | logprobs | backward | optimizer_step |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in r["rows"]:
        s, ph = row["summary"], row["summary"]["phases"]
        phases = " | ".join(f"{ph[k]:.2f}" if k in ph else "" for k in
                            ("gather", "generate", "reward", "counterfactual", "policy_rewards", "train", "logprobs",
                             "backward", "optimizer_step"))
        lines.append(f"| {row['factor']} | {row['value']} | {s['s_per_step']:.2f} | {s['tokens_per_step']:.0f} | "
                     f"{phases} |")
    cf = {row["value"]: row["summary"]["s_per_step"] for row in r["rows"] if row["factor"] == "tcpo_cf"}
    if 0 in cf and 5 in cf:
        share = shares(r, "tcpo_cf", 5, "counterfactual")
        lines += ["", f"TCPO counterfactual overhead: {cf[5] / cf[0]:.3f}x the step time without counterfactuals "
                      f"(paper: 1.03 to 1.05x; issue 21's target <= 1.15x); in-step share of the counterfactuals "
                      f"{share:.1%}."]
    ma = {row["value"]: row["summary"]["s_per_step"] for row in r["rows"] if row["factor"] == "maestro"}
    if 0 in ma and 1 in ma:
        share = shares(r, "maestro", 1, "policy_rewards")
        lines += ["", f"MAESTRO policy-rewards overhead: {ma[1] / ma[0]:.3f}x the GDPO step on the same task "
                      f"(issue 21's target <= 1.05x); in-step share of the policy rewards (ppl, ent, fmt, len, the "
                      f"Conductor's hidden state) {share:.1%}."]
    return "\n".join(lines) + "\n"


def shares(r: dict, factor: str, value: int, phase: str) -> float:
    """The phase's mean seconds over the cell's mean step seconds (both from the same steps)."""
    row = next(row for row in r["rows"] if row["factor"] == factor and row["value"] == value)
    return row["summary"]["phases"].get(phase, 0.0) / row["summary"]["s_per_step"]


if __name__ == "__main__":
    main()
