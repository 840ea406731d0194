"""Cost of each registered advantage estimator at N responses (default 4096 = 1024 prompts x 4), as the trainer
calls it (`build_method(name, args).advantages(batch)`: the method's adapter with train.py's default flags), compared with a training step's time. Target (issue 10): under 1% of a step.

Inputs: binary correctness; 3 reward components for the multi-reward methods (correctness, a binary format reward
that abstains (NaN) on ~10% of responses, a continuous length score); T turns of verify-and-refine scores for the
turn-level methods (NaN after a trajectory's first success), with fixed-history counterfactuals on ~1% of turns.

    .venv/bin/python benchmarks/bench_advantages.py --step_seconds 20
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch

from benchmarks.results_io import write_results
from rl.config import build_parser
from rl.methods import METHODS, build_method
from rl.types import GlobalBatch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# TRL's GRPOTrainer on this task, measured before credo existed (issue 10): the fallback reference step.
TRL_STEP_SECONDS = 33.0


def make_inputs(prompts: int, group: int, turns: int, seed: int) -> GlobalBatch:
    g = torch.Generator().manual_seed(seed)
    n = prompts * group
    group_ids = torch.arange(prompts).repeat_interleave(group)
    p_right = torch.rand(prompts, generator=g).repeat_interleave(group)  # per-prompt difficulty: mixed groups
    correct = (torch.rand(n, generator=g) < p_right).float()
    fmt = (torch.rand(n, generator=g) < 0.6).float()
    fmt[torch.rand(n, generator=g) < 0.1] = float("nan")  # abstentions
    lengths = torch.randint(4, 49, (n,), generator=g)
    length_score = 1.0 - lengths.float() / 48.0
    # Verify-and-refine: a turn after a success does not happen (NaN).
    turn_scores = (torch.rand(n, turns, generator=g) < p_right.unsqueeze(1)).float()
    solved = torch.cumsum(turn_scores, dim=1) > 0
    after_success = torch.cat([torch.zeros(n, 1, dtype=torch.bool), solved[:, :-1]], dim=1)
    turn_scores[after_success] = float("nan")
    counterfactual = torch.full((n, turns), float("nan"))
    pick = (torch.rand(n, turns, generator=g) < 0.01) & ~torch.isnan(turn_scores)
    counterfactual[pick] = torch.rand(int(pick.sum()), generator=g) - 0.5
    final = turn_scores.nan_to_num(nan=1.0)[:, -1]  # NaN at the end means the trajectory succeeded earlier
    return GlobalBatch(scores=correct, group_ids=group_ids, lengths=lengths,
                       components={"correctness": correct, "format": fmt, "length": length_score},
                       correctness=correct, turn_scores=turn_scores, extras={"counterfactual": counterfactual}), final


def time_method(name: str, inputs: GlobalBatch, args, repeats: int, warmup: int = 2) -> list:
    method = build_method(name, args)  # no StepContext: only the advantages run
    for _ in range(warmup):
        method.advantages(inputs)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        method.advantages(inputs)
        times.append(time.perf_counter() - t0)
    return times


def reference_step(step_seconds, vs_trl_path):
    if step_seconds is not None:
        return step_seconds, "--step_seconds"
    if os.path.exists(vs_trl_path):
        with open(vs_trl_path) as f:
            runs = json.load(f)["runs"]
        credo = {k: v["summary"]["s_per_step"] for k, v in runs.items() if k != "trl"}
        if credo:
            best = min(credo, key=credo.get)
            return credo[best], f"{best} in {os.path.relpath(vs_trl_path, REPO)}"
    return TRL_STEP_SECONDS, "TRL GRPOTrainer step on this task, measured before credo (issue 10)"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=1024)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--turns", type=int, default=3, help="turns for the turn-level methods")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--step_seconds", type=float, default=None,
                   help="reference step time; default: the best credo run in benchmarks/results/vs_trl.json, else "
                        f"TRL's {TRL_STEP_SECONDS} s")
    p.add_argument("--vs_trl", default=os.path.join(REPO, "benchmarks", "results", "vs_trl.json"))
    p.add_argument("--results", default=os.path.join(REPO, "benchmarks", "results", "advantages_cost"),
                   help="writes RESULTS.json and RESULTS.md")
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    step_s, step_source = reference_step(a.step_seconds, a.vs_trl)
    inputs, trajectory_final = make_inputs(a.prompts, a.group, a.turns, a.seed)
    args = build_parser().parse_args([])  # train.py's defaults: the knobs every adapter reads
    n = a.prompts * a.group
    rows = []
    for name in sorted(METHODS):
        # Multi-turn runs give trajectory-level methods the trajectory score (--traj_score final); single-turn
        # methods see one score per response either way, so the cost is the same.
        batch = inputs
        if not METHODS[name].turn_level:
            batch = GlobalBatch(**{**inputs.__dict__, "turn_scores": None, "extras": {}})
        else:
            batch = GlobalBatch(**{**inputs.__dict__, "scores": trajectory_final})
        row = {"method": name}
        try:
            times = time_method(name, batch, args, a.repeats)
        except Exception as exc:  # noqa: BLE001 (a method that needs more than these inputs is reported, not fatal)
            row.update(error=f"{type(exc).__name__}: {exc}")
        else:
            median = statistics.median(times)
            row.update(median_ms=1e3 * median, min_ms=1e3 * min(times), max_ms=1e3 * max(times),
                       share_of_step=median / step_s)
        rows.append(row)
        print(json.dumps(row), flush=True)
    argv_shown = sys.argv if argv is None else ["benchmarks/bench_advantages.py", *argv]
    machine = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "torch": torch.__version__,
               "loadavg": os.getloadavg()}
    result = {"n_responses": n, "prompts": a.prompts, "group": a.group, "turns": a.turns, "components": 3,
              "repeats": a.repeats, "reference_step_s": step_s, "reference_step_source": step_source,
              "torch_threads": torch.get_num_threads(), "machine": machine,
              "command": " ".join([os.path.relpath(sys.executable, REPO), *argv_shown]), "methods": rows}
    _cpu_model(result)
    write_results(result, a.results, report)
    return result


def _cpu_model(result):
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    result["machine"]["cpu"] = line.split(":", 1)[1].strip()
                    return
    except OSError:
        pass


def report(r: dict) -> str:
    lines = [f"# Advantage estimator cost at N = {r['n_responses']} responses",
             "",
             f"Command: `{r['command']}`", "",
             f"{r['prompts']} prompts x {r['group']} responses; 3 reward components (one abstaining on ~10%); "
             f"{r['turns']} turns for tcpo / mt_grpo. Median of {r['repeats']} calls of the registry adapter with "
             f"train.py's default flags, {r['torch_threads']} torch threads, {r['machine']['cpu']} "
             f"(load average {r['machine']['loadavg'][0]:.1f} on {r['machine']['cores']} cores). "
             f"Reference step: {r['reference_step_s']:.1f} s ({r['reference_step_source']}).", "",
             "| method | median ms | min ms | max ms | share of a step |", "|---|---|---|---|---|"]
    for m in r["methods"]:
        if "error" in m:
            lines.append(f"| {m['method']} | error: {m['error']} | | | |")
        else:
            lines.append(f"| {m['method']} | {m['median_ms']:.2f} | {m['min_ms']:.2f} | {m['max_ms']:.2f} | "
                         f"{100 * m['share_of_step']:.4f}% |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
