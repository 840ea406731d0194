"""MAESTRO's Conductor and the scale of its rewards: does a reward's offset or unit decide which one it emphasises?

Why (issue 42): in the issue-19 sweep the Conductor put pi 0.999 on `len` for both prompt kinds. With a context-only
input, the expected meta-reward of emphasising reward k is eta (1 - 1/G) (mu_k - sum_j pi_j mu_j) (divided by the
group's std under GRPO's std scaling; rl/advantages/maestro.py derives it): the Conductor picks the reward whose
*level* mu_k is highest in the context, so a reward that is merely shifted up wins everywhere.

Task. Two prompt kinds (A, B); the Conductor sees h = onehot(kind) (the stand-in for the policy's hidden state).
Two rewards per response, fresh Bernoulli draws each step (no actor: the Conductor's own learning, isolated):
    reward_1 ~ Bernoulli(0.7) on kind A, Bernoulli(0.3) on kind B       (the best reward of kind A)
    reward_2 ~ Bernoulli(0.3) on kind A, Bernoulli(0.7) on kind B       (the best reward of kind B)
Perturbations of reward_2's scale (the information is unchanged, only its offset or unit): `equal` (none),
`shift` (reward_2 + 1, like a reward whose floor sits higher), `stretch` (reward_2 x 5). Scales compared on:
`none` (as given; what the issue-19 sweep did) and `batch_rank` (credo's reading, --maestro_reward_scale's default).
Every arm uses credo's own `rl.advantages.maestro` (w(a) = (1 - eta)/K + eta onehot(a), eta 0.5, then GRPO with its
group std scaling, the sweep's default; the condition `stretch, no std` uses --scale_rewards none, Dr.GRPO) and
`rl.methods.maestro_conductor.ConductorLearner` (lr 0.05, an update every step, entropy 1e-3: the small-run recipe's M = 1 with the
existing bandit's lr). Same seeds in every arm.

Deciding metrics, fixed before the first run: after `steps` steps, per arm, (1) kind separation, the L1 distance
between pi(. | A) and pi(. | B) (0 = identical, 2 = opposite one-hots), mean +- SE over seeds; (2) seeds that
*separate* (top reward_1 on A and reward_2 on B) and seeds that *collapse* (the same top reward on both kinds, with
pi > 0.9 on both). Also measured: the meta-reward's signal at the uniform start, E[A | a = reward_1] - E[A | a =
reward_2] per kind (mean +- SE over batches), under GRPO's std scaling and without it (where the formula is exact).
A development run of 4 seeds preceded the recorded one (it added the `stretch, no std` condition: under GRPO's std
scaling a x5 stretch did not flip kind A's signal).

    python -m experiments.mechanisms.maestro_scales     # writes experiments/results/mechanisms_maestro_scales.*
"""
import math
import time

import torch

from benchmarks.paired import PAIRED_HEADER, format_paired_row, mean_se, paired
from experiments.mechanisms.report import environment, testbed_main
from rl.advantages import maestro
from rl.advantages.maestro import scale_rewards
from rl.methods.maestro_conductor import ConductorLearner

KINDS = ("A", "B")
REWARDS = ("reward_1", "reward_2")
P_ONE = torch.tensor([[0.7, 0.3], [0.3, 0.7]])   # P(reward = 1 | kind), rows A, B
PERTURBATIONS = {"equal": (1.0, 0.0), "shift": (1.0, 1.0), "stretch": (5.0, 0.0)}  # reward_2 -> a * reward_2 + b
SCALES = ("none", "batch_rank")
CONDITIONS = {"equal": ("equal", "group"), "shift": ("shift", "group"), "stretch": ("stretch", "group"),
              "stretch, no std": ("stretch", "none")}  # name -> (perturbation, GRPO's --scale_rewards)
SETUP = {"groups": 8, "group_size": 4, "eta": 0.5, "lr": 0.05, "entropy_coef": 1e-3, "steps": 150}
DECIDING_METRIC = ("after `steps` steps, per arm: kind separation L1(pi(.|A), pi(.|B)), mean +- SE over seeds; seeds "
                   "that separate (top reward_1 on A, reward_2 on B) and that collapse (one top reward on both kinds, "
                   "pi > 0.9 on both)")


def batch_layout(setup: dict):
    """(kind Tensor[N] long, group_ids Tensor[N] long): half the groups of each kind, alternating."""
    kind = (torch.arange(setup["groups"]) % 2).repeat_interleave(setup["group_size"])
    return kind, torch.arange(setup["groups"]).repeat_interleave(setup["group_size"])


def draw_rewards(kind: torch.Tensor, perturbation: str, gen: torch.Generator) -> torch.Tensor:
    """Tensor[N, 2]: the Bernoulli rewards of each response, reward_2 perturbed."""
    rewards = torch.bernoulli(P_ONE[kind], generator=gen)
    a, b = PERTURBATIONS[perturbation]
    return rewards * torch.tensor([1.0, a]) + torch.tensor([0.0, b])


def train_conductor(draw, grpo_scale: str, reward_scale: str, seed: int, setup: dict = SETUP) -> torch.Tensor:
    """credo's Conductor on the two-kind bandit, h = onehot(kind), one update a step. draw(kind Tensor[N], gen) ->
    Tensor[N, 2] the step's rewards. Returns pi(. | kind) as Tensor[2 kinds, 2 rewards]."""
    gen = torch.Generator().manual_seed(seed)
    kind, group_ids = batch_layout(setup)
    h = torch.nn.functional.one_hot(kind, 2).to(torch.float32)
    learner = ConductorLearner(2, 2, lr=setup["lr"], entropy_coef=setup["entropy_coef"], update_interval=1, seed=seed)
    for _ in range(setup["steps"]):
        rewards = draw(kind, gen)
        actions, _ = learner.act(h)
        adv = maestro(rewards, actions, group_ids, eta=setup["eta"], scale=grpo_scale, reward_scale=reward_scale)
        learner.record(h, actions, adv)
    return learner.probs(torch.eye(2))


def train(condition: str, scale: str, seed: int, setup: dict = SETUP) -> dict:
    perturbation, grpo_scale = CONDITIONS[condition]
    probs = train_conductor(lambda kind, gen: draw_rewards(kind, perturbation, gen), grpo_scale, scale, seed, setup)
    top = [REWARDS[int(probs[k].argmax())] for k in (0, 1)]
    return {"probs": {KINDS[k]: dict(zip(REWARDS, probs[k].tolist())) for k in (0, 1)},
            "top": dict(zip(KINDS, top)), "separation": float((probs[0] - probs[1]).abs().sum()),
            "separates": top == ["reward_1", "reward_2"],
            "collapses": top[0] == top[1] and bool((probs.max(1).values > 0.9).all())}


def start_signal(perturbation: str, scale: str, grpo_scale: str, batches: int = 400, seed: int = 0,
                 setup: dict = SETUP) -> dict:
    """At the uniform start: per kind, E[A | a = reward_1] - E[A | a = reward_2], estimated without bias by
    2 mean(A * (+1 for reward_1, -1 for reward_2)) (proportional to the Conductor's expected REINFORCE gradient there),
    mean +- SE over batches; the rewards' levels (mean per kind on the scale compared); `formula` is
    eta (1 - 1/G) (mu_1 - mu_2), exact for grpo_scale "none"."""
    gen = torch.Generator().manual_seed(seed)
    kind, group_ids = batch_layout(setup)
    diffs, levels = {k: [] for k in KINDS}, {k: torch.zeros(2) for k in KINDS}
    for _ in range(batches):
        rewards = draw_rewards(kind, perturbation, gen)
        actions = torch.randint(0, 2, (len(kind),), generator=gen)
        adv = maestro(rewards, actions, group_ids, eta=setup["eta"], scale=grpo_scale, reward_scale=scale)
        scaled = scale_rewards(rewards, scale)
        for k, name in enumerate(KINDS):
            rows = kind == k
            diffs[name].append(float(2 * (adv[rows] * (1 - 2 * actions[rows])).mean()))
            levels[name] += scaled[rows].mean(0) / batches
    g = setup["group_size"]
    out = {}
    for name in KINDS:
        d = torch.tensor(diffs[name], dtype=torch.float64)
        mu = levels[name]
        out[name] = {"mean": float(d.mean()), "se": float(d.std() / math.sqrt(len(d))), "levels": mu.tolist(),
                     "formula": setup["eta"] * (1 - 1 / g) * float(mu[0] - mu[1])}
    return out


def run(seeds, setup: dict = SETUP) -> dict:
    t0 = time.time()
    arms = {f"{c}/{s}": [train(c, s, seed, setup) for seed in seeds] for c in CONDITIONS for s in SCALES}
    comparisons = {f"{c}: batch_rank vs none": paired([r["separation"] for r in arms[f"{c}/batch_rank"]],
                                                      [r["separation"] for r in arms[f"{c}/none"]])
                   for c in CONDITIONS}
    signal = {f"{p}/{s}": {g: start_signal(p, s, g, setup=setup) for g in ("group", "none")}
              for p in PERTURBATIONS for s in SCALES}
    same_grpo = [c for c in CONDITIONS if CONDITIONS[c][1] == "group"]
    identical = all(arms[f"{c}/batch_rank"] == arms["equal/batch_rank"] for c in same_grpo)
    return {"name": "maestro_scales", "deciding_metric": DECIDING_METRIC, "seeds": list(seeds), "setup": setup,
            "p_one": P_ONE.tolist(), "perturbations": PERTURBATIONS, "conditions": CONDITIONS, "runs": arms,
            "comparisons": comparisons, "start_signal": signal, "batch_rank_runs_identical": identical,
            "seconds": time.time() - t0, "environment": environment()}


def report(result: dict) -> str:
    n = len(result["seeds"])
    lines = ["# Mechanism testbed: the scale of MAESTRO's rewards decides the Conductor's choice (credo's "
             "`ConductorLearner` and `rl.advantages.maestro`)\n",
             "`python -m experiments.mechanisms.maestro_scales` (seeds 0..N-1, `--seeds N`).\n",
             f"Deciding metric (fixed before running): {result['deciding_metric']}.\n",
             f"Setup: {result['setup']}; P(reward = 1 | kind) rows A, B: {result['p_one']}; reward_2 -> a * reward_2 "
             f"+ b per perturbation (a, b): {result['perturbations']}; conditions (perturbation, --scale_rewards): "
             f"{result['conditions']}; {n} seeds ({result['seeds'][0]}.."
             f"{result['seeds'][-1]}), the same in every arm; {result['seconds']:.0f} s.\n",
             "| condition / reward scale | kind separation (L1) ± SE | pi(reward_1 \\| A) ± SE "
             "| pi(reward_2 \\| B) ± SE | seeds separating | seeds collapsing |", "|---|---|---|---|---|---|"]
    for arm, xs in result["runs"].items():
        sep = mean_se([x["separation"] for x in xs])
        pa, pb = mean_se([x["probs"]["A"]["reward_1"] for x in xs]), mean_se([x["probs"]["B"]["reward_2"] for x in xs])
        collapsed = sorted({x["top"]["A"] for x in xs if x["collapses"]})
        lines.append(f"| {arm} | {sep[0]:.3f} ± {sep[1]:.3f} | {pa[0]:.3f} ± {pa[1]:.3f} | {pb[0]:.3f} ± "
                     f"{pb[1]:.3f} | {sum(x['separates'] for x in xs)}/{n} | {sum(x['collapses'] for x in xs)}/{n}"
                     + (f" (onto {', '.join(collapsed)})" if collapsed else "") + " |")
    lines.append(f"\nThe batch_rank arms under GRPO's std scaling (equal, shift, stretch) are identical run for run: "
                 f"{result['batch_rank_runs_identical']} (a rank is unchanged by any increasing transform of a reward)."
                 "\n")
    lines += ["Paired kind separation (a - b) over the same seeds:\n", PAIRED_HEADER]
    lines += [format_paired_row(label, c) for label, c in result["comparisons"].items()]
    lines += ["\nThe meta-reward's signal at the uniform start, E[A | a = reward_1] - E[A | a = reward_2] (positive: "
              "emphasise reward_1), mean ± SE over 400 batches; levels = each reward's mean on the scale compared; "
              "formula = eta (1 - 1/G) (mu_1 - mu_2), exact without GRPO's std scaling:\n",
              "| perturbation / reward scale | kind | levels (reward_1, reward_2) | signal, --scale_rewards group | "
              "signal, --scale_rewards none | formula |", "|---|---|---|---|---|---|"]
    for arm, by_grpo in result["start_signal"].items():
        for k in KINDS:
            g, d = by_grpo["group"][k], by_grpo["none"][k]
            lines.append(f"| {arm} | {k} | {g['levels'][0]:.3f}, {g['levels'][1]:.3f} | {g['mean']:+.3f} ± "
                         f"{g['se']:.3f} | {d['mean']:+.3f} ± {d['se']:.3f} | {d['formula']:+.3f} |")
    return "\n".join(lines) + "\n"


def main():
    testbed_main(__doc__, "maestro_scales", run, report, seeds=12, min_seeds=2)


if __name__ == "__main__":
    main()
