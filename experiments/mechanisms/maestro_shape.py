"""MAESTRO's Conductor under GRPO's std scaling: does a reward's *shape* decide its choice when every level is equal?

Why (issue 42): with the rewards on one scale (--maestro_reward_scale batch_rank, every reward's batch mean 0.5) the
rerun's Conductor still moved onto `len` for both prompt kinds on 3 of 3 seeds. The level formula of
rl/advantages/maestro.py is exact only without GRPO's std division. With it, each group's advantages are divided by
that group's std of the mixed score, so a small margin and a large one earn about the same advantage: at G = 2 the
advantage is exactly +-1/sqrt(2), the sign of s_1 - s_2. The meta-reward then counts how often emphasising reward k
puts a response *above* its group, not by how much: a reward whose batch ranks sit mostly above 0.5 with a few far
below (a tied block at its top: `len`, which is 1 for every response at or under --len_min tokens) wins at equal
mean, one with a tied block at its bottom (`fmt` when most responses fail it) loses.

Task. Two prompt kinds (A, B); the Conductor sees h = onehot(kind). Two rewards per response, drawn afresh each step
from the *same* distribution on both kinds, so neither carries information about the kind and neither deserves
emphasis: reward_2 ~ Uniform(0, 1) (continuous, like a group-ranked ppl or ent); reward_1 by shape (SHAPES):
    uniform:  Uniform(0, 1)                      (the control: the two rewards exchangeable)
    rare:     Bernoulli(0.15)                    (fmt early in the sweep: raw fmt 0.06-0.16 over steps 1-8)
    ceiling:  min(1, Uniform(0, 1) / 0.4)        (60% tied at 1: len once most responses are short)
Both rewards are put on one scale by batch_rank (credo's default), so both have batch mean 0.5 in every arm. Every arm
uses credo's own `rl.advantages.maestro` (eta 0.5) and `rl.methods.maestro_conductor.ConductorLearner` with maestro_scales's setup
(lr 0.05, an update every step, entropy 1e-3, 8 groups of 4, 150 steps), GRPO's std scaling on (`group`, the sweep's
default) or off (`none`, Dr.GRPO: the level formula exact). Same seeds in every arm.

Deciding metrics, fixed before the first run: after `steps` steps, per arm, (1) pi(reward_1) averaged over the two
kinds, mean +- SE over seeds (0.5 = no preference, which is right here); (2) seeds that collapse (one reward with
pi > 0.9 on both kinds) and onto which reward. Also measured: the meta-reward's signal at the uniform start,
E[A | a = reward_1] - E[A | a = reward_2] (mean +- SE over batches). Predictions written with the metrics, before the
first run: under `group`, `rare` collapses onto reward_2 and `ceiling` onto reward_1, `uniform` does not; under
`none` no shape moves pi beyond noise.

    python -m experiments.mechanisms.maestro_shape     # writes experiments/results/mechanisms_maestro_shape.*
"""
import math
import time

import torch

from experiments.mechanisms.maestro_scales import SETUP, batch_layout, mean_se, train_conductor
from benchmarks.paired import PAIRED_HEADER, format_paired_row, paired
from experiments.mechanisms.report import environment, testbed_main
from rl.advantages import maestro

REWARDS = ("reward_1", "reward_2")
SHAPES = ("uniform", "rare", "ceiling")
GRPO_SCALES = ("group", "none")
DECIDING_METRIC = ("after `steps` steps, per arm: pi(reward_1) averaged over both kinds, mean +- SE over seeds; seeds "
                   "that collapse (one reward with pi > 0.9 on both kinds), and onto which reward")
PREDICTION = ("under group: rare collapses onto reward_2, ceiling onto reward_1, uniform does not; under none: no "
              "shape moves pi beyond noise")


def draw_rewards(n: int, shape: str, gen: torch.Generator) -> torch.Tensor:
    """Tensor[n, 2]: reward_1 of the given shape, reward_2 ~ Uniform(0, 1); the same on both kinds."""
    u = torch.rand((n, 2), generator=gen)
    if shape == "rare":
        first = (u[:, 0] < 0.15).float()
    elif shape == "ceiling":
        first = (u[:, 0] / 0.4).clamp(max=1.0)
    elif shape == "uniform":
        first = u[:, 0]
    else:
        raise ValueError(f"shape must be one of {SHAPES}, got {shape!r}")
    return torch.stack([first, u[:, 1]], dim=1)


def train(shape: str, grpo_scale: str, seed: int, setup: dict = SETUP) -> dict:
    probs = train_conductor(lambda kind, gen: draw_rewards(len(kind), shape, gen), grpo_scale, "batch_rank", seed,
                            setup)
    top = [REWARDS[int(probs[k].argmax())] for k in (0, 1)]
    return {"pi_reward_1": float(probs[:, 0].mean()), "top": top,
            "collapses": top[0] == top[1] and bool((probs.max(1).values > 0.9).all())}


def start_signal(shape: str, grpo_scale: str, batches: int = 400, seed: int = 0, setup: dict = SETUP) -> dict:
    """At the uniform start, E[A | a = reward_1] - E[A | a = reward_2] over both kinds, estimated without bias by
    2 mean(A * (+1 for reward_1, -1 for reward_2)); mean +- SE over batches."""
    gen = torch.Generator().manual_seed(seed)
    kind, group_ids = batch_layout(setup)
    diffs = []
    for _ in range(batches):
        rewards = draw_rewards(len(kind), shape, gen)
        actions = torch.randint(0, 2, (len(kind),), generator=gen)
        adv = maestro(rewards, actions, group_ids, eta=setup["eta"], scale=grpo_scale, reward_scale="batch_rank")
        diffs.append(float(2 * (adv * (1 - 2 * actions)).mean()))
    d = torch.tensor(diffs, dtype=torch.float64)
    return {"mean": float(d.mean()), "se": float(d.std() / math.sqrt(len(d)))}


def run(seeds, setup: dict = SETUP) -> dict:
    t0 = time.time()
    arms = {f"{shape}/{g}": [train(shape, g, seed, setup) for seed in seeds] for shape in SHAPES for g in GRPO_SCALES}
    signal = {f"{shape}/{g}": start_signal(shape, g, setup=setup) for shape in SHAPES for g in GRPO_SCALES}
    # Added after the first recorded run, on the same runs (not a deciding metric): REINFORCE's drift at this lr makes
    # single runs collapse at random (the uniform control too), so the std scaling's effect is read seed by seed.
    comparisons = {f"{shape}: group - none": paired([r["pi_reward_1"] for r in arms[f"{shape}/group"]],
                                                    [r["pi_reward_1"] for r in arms[f"{shape}/none"]])
                   for shape in SHAPES}
    return {"name": "maestro_shape", "deciding_metric": DECIDING_METRIC, "prediction": PREDICTION,
            "seeds": list(seeds), "setup": setup, "runs": arms, "start_signal": signal, "comparisons": comparisons,
            "seconds": time.time() - t0, "environment": environment()}


def report(result: dict) -> str:
    n = len(result["seeds"])
    lines = ["# Mechanism testbed: under GRPO's std scaling a reward's shape, not its level, decides MAESTRO's "
             "Conductor (credo's `ConductorLearner` and `rl.advantages.maestro`)\n",
             "`python -m experiments.mechanisms.maestro_shape` (seeds 0..N-1, `--seeds N`).\n",
             f"Deciding metric (fixed before running): {result['deciding_metric']}.\n",
             f"Prediction (written before running): {result['prediction']}.\n",
             f"Setup: {result['setup']}; rewards on batch_rank (batch mean 0.5 each), the same distribution on both "
             f"kinds; {n} seeds ({result['seeds'][0]}..{result['seeds'][-1]}), the same in every arm; "
             f"{result['seconds']:.0f} s.\n",
             "| reward_1's shape / --scale_rewards | pi(reward_1) ± SE (0.5 = no preference) | seeds collapsing | "
             "signal at the start, E[A \\| reward_1] - E[A \\| reward_2] ± SE |", "|---|---|---|---|"]
    for arm, xs in result["runs"].items():
        pi = mean_se([x["pi_reward_1"] for x in xs])
        onto = sorted({x["top"][0] for x in xs if x["collapses"]})
        s = result["start_signal"][arm]
        lines.append(f"| {arm} | {pi[0]:.3f} ± {pi[1]:.3f} | {sum(x['collapses'] for x in xs)}/{n}"
                     + (f" (onto {', '.join(onto)})" if onto else "") + f" | {s['mean']:+.4f} ± {s['se']:.4f} |")
    lines += ["\nPaired over the same seeds, pi(reward_1) under GRPO's std scaling minus without it (added after the "
              "first recorded run, computed on its runs; not a deciding metric: single runs collapse at random at this "
              "lr, the uniform control too, so the scaling's effect is read seed by seed):\n", PAIRED_HEADER]
    lines += [format_paired_row(label, c) for label, c in result["comparisons"].items()]
    return "\n".join(lines) + "\n"


def main():
    testbed_main(__doc__, "maestro_shape", run, report, seeds=12, min_seeds=2)


if __name__ == "__main__":
    main()
