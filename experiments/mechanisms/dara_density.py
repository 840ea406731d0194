"""DARA vs GDPO on a factorised Bernoulli policy: does density-aware weighting speed up a sparse reward?

Task (known optimum: every bit on). The policy is 1 + D independent Bernoulli bits with logits theta. Two rewards:
- `sparse`: bit 0 ("format"), a binary reward whose success rate starts at p0;
- `dense`: the fraction of the D content bits that are on (graded, so it varies inside almost every group).
Each step samples B prompts x G responses (all prompts alike: a group is just G draws), computes advantages with
credo's own `rl.advantages.gdpo` / `dara` on the [N, 2] reward matrix, and takes one REINFORCE step
theta += lr * mean_i A_i * (a_i - p) (the exact score function of a Bernoulli).

Two regimes, as DARA's paper separates them:
- `sparse_from_below`: p0 = 0.05, threshold 0.8 (the sparse reward is active in few groups on the way up);
- `near_saturation`: p0 = 0.8, threshold 0.99 (it becomes sparse on the way to the top: failures get rare).

Deciding metric, fixed before the first run: the first step at which the policy's *exact* probability of the
sparse bit reaches the threshold (no sampling noise in the metric itself); a run that never reaches it within
MAX_STEPS counts as MAX_STEPS + 1 (censored, counted in the table). Paired over seeds: GDPO steps - DARA steps
(positive = DARA faster), and DARA's relative saving. Secondary: the dense reward's expected value at that step.

    python -m experiments.mechanisms.dara_density            # writes experiments/results/mechanisms_dara_density.*
"""
import time

import torch

from benchmarks.paired import (PAIRED_HEADER, failure_probability, format_paired_row, format_probability,
                                          paired)
from experiments.mechanisms.report import environment, testbed_main
from rl.advantages import dara, gdpo


DECIDING_METRIC = ("first step at which the exact P(sparse bit on) >= threshold (MAX_STEPS + 1 if never); "
                   "paired difference GDPO - DARA in steps, positive = DARA faster")
REGIMES = {"sparse_from_below": {"p0": 0.05, "threshold": 0.8}, "near_saturation": {"p0": 0.8, "threshold": 0.99}}
METHODS = {
    "gdpo": lambda c, g: gdpo(c, g),
    "dara-asym": lambda c, g: dara(c, g, variant="asym")[0],
    "dara-sym": lambda c, g: dara(c, g, variant="sym")[0],
}
SETUP = {"content_bits": 32, "content_p0": 0.3, "groups": 8, "group_size": 4, "lr": 0.3, "max_steps": 1000}


def logit(p: float) -> float:
    return float(torch.logit(torch.tensor(p, dtype=torch.float64)))


def steps_to_threshold(method: str, p0: float, threshold: float, seed: int, setup: dict = SETUP) -> dict:
    """One REINFORCE run until the sparse bit's probability reaches `threshold` (or max_steps)."""
    gen = torch.Generator().manual_seed(seed)
    d, n = setup["content_bits"], setup["groups"] * setup["group_size"]
    theta = torch.tensor([logit(p0)] + [logit(setup["content_p0"])] * d, dtype=torch.float64)
    group_ids = torch.arange(setup["groups"]).repeat_interleave(setup["group_size"])
    advantage = METHODS[method]
    for step in range(1, setup["max_steps"] + 1):
        p = torch.sigmoid(theta)
        bits = torch.bernoulli(p.expand(n, -1), generator=gen)
        rewards = torch.stack([bits[:, 0], bits[:, 1:].mean(1)], dim=1)   # [N, 2]: sparse, dense
        adv = advantage(rewards, group_ids).to(torch.float64)
        theta = theta + setup["lr"] * (adv[:, None] * (bits - p)).mean(0)
        p = torch.sigmoid(theta)
        if p[0] >= threshold:
            return {"steps": step, "censored": False, "dense_at_threshold": float(p[1:].mean())}
    return {"steps": setup["max_steps"] + 1, "censored": True, "dense_at_threshold": float(torch.sigmoid(theta)[1:].mean())}


def run(seeds, regimes=tuple(REGIMES), methods=tuple(METHODS), setup: dict = SETUP) -> dict:
    t0 = time.time()
    runs = {r: {m: [steps_to_threshold(m, REGIMES[r]["p0"], REGIMES[r]["threshold"], s, setup) for s in seeds]
                for m in methods} for r in regimes}
    comparisons = {}
    for r in regimes:
        steps = {m: [x["steps"] for x in runs[r][m]] for m in methods}
        comparisons[r] = {f"gdpo vs {m}": paired(steps["gdpo"], steps[m]) for m in methods if m != "gdpo"}
        for m in methods:
            if m != "gdpo":
                c = comparisons[r][f"gdpo vs {m}"]
                c["relative_saving"] = c["mean_diff"] / c["mean_a"]
    return {"name": "dara_density", "deciding_metric": DECIDING_METRIC, "seeds": list(seeds), "regimes":
            {r: REGIMES[r] for r in regimes}, "setup": setup, "runs": runs, "comparisons": comparisons,
            "seconds": time.time() - t0, "environment": environment()}


def report(result: dict) -> str:
    lines = [f"# Mechanism testbed: DARA vs GDPO (credo's own `rl.advantages.gdpo` / `dara`)\n",
             f"Deciding metric (fixed before running): {result['deciding_metric']}.\n",
             f"Setup: {result['setup']}; {len(result['seeds'])} paired seeds; {result['seconds']:.0f} s.\n"]
    for r, spec in result["regimes"].items():
        lines.append(f"\n## {r}: sparse reward p0 = {spec['p0']}, threshold {spec['threshold']}\n")
        lines.append("| method | mean steps | censored | dense reward at threshold |\n|---|---|---|---|")
        for m, xs in result["runs"][r].items():
            mean_steps = sum(x["steps"] for x in xs) / len(xs)
            dense = sum(x["dense_at_threshold"] for x in xs) / len(xs)
            lines.append(f"| {m} | {mean_steps:.1f} | {sum(x['censored'] for x in xs)} | {dense:.3f} |")
        lines.append("\nPaired steps to threshold (a - b > 0: b is faster):\n")
        lines.append(PAIRED_HEADER)
        for label, c in result["comparisons"][r].items():
            lines.append(format_paired_row(label, c, digits=1))
        for label, c in result["comparisons"][r].items():
            lines.append(f"\n- {label}: b saves {100 * c['relative_saving']:.0f}% of GDPO's steps; chance that as many "
                         f"fresh seeds give a mean of the other sign: "
                         f"{format_probability(failure_probability(c['mean_diff'], c['sd_diff'], c['n']))}")
    return "\n".join(lines) + "\n"


def main():
    testbed_main(__doc__, "dara_density", run, report, seeds=16)


if __name__ == "__main__":
    main()
