"""MAESTRO on a contextual bandit: which reward channel does credo's Conductor learn to emphasise for each prompt kind?

Task. Two prompt kinds (A, B); a prompt's kind is its context, given to the Conductor as h = onehot(kind) (the
stand-in for the policy's final hidden state). The actor is a tabular softmax over 4 responses per kind, starting
uniform. Hidden utility (what the user wants): response 0 on kind A, response 1 on kind B. Four reward channels:
    verifier_A  kind A: 1 for response 0 (aligned with A's utility); kind B: 1 for response 2 (measures the wrong thing)
    verifier_B  kind B: 1 for response 1 (aligned with B's utility); kind A: 1 for response 3 (wrong thing)
    noise       Bernoulli(0.5), independent of the response
    context     1 on kind A, 0 on kind B: readable from the prompt, the same for every response (useless)
With equal weights the actor cannot tell response 0 from 3 on kind A (both earn one channel), so its utility stalls
at 0.5; a Conductor that emphasises verifier_A on A and verifier_B on B (the paper's claim: different trade-offs
for different prompts) lets the actor reach 1.

Each step: B prompts (half of each kind) x G responses; the rewards [N, 4] go through credo's own
`rl.advantages.maestro` (w(a) = (1 - eta)/K + eta onehot(a), eta = 0.5, then GRPO) on the channels' own scales
(reward_scale "none", as when this testbed was recorded: `context` wins kind A because its level is highest there,
the mechanism experiments/mechanisms/maestro_scales.py measures); the actor takes a REINFORCE
step on those advantages; the Conductor is credo's own `rl.methods.maestro_conductor.ConductorLearner`, driven without a model
(act on h, record (h, a, A)). Arms, same seeds:
- `conductor`: the small-run recipe (credo's reading, issue 19 item 2): h one-hot (|h|_1 = 1), lr 0.05, an update
  every step (M = 1);
- `conductor-paper-lr`: the documented GPU default lr 5e-5, M = 3 (the control: can it move in this many steps?);
- `equal`: equal weights 1/K (no Conductor); `random`: a uniformly random emphasis action per response.

Deciding metrics, fixed before the first run: after `steps` steps, (1) per kind, which channel the Conductor
gives the largest probability (counted over seeds) and its probability of the aligned channel; (2) the actor's
expected utility (mean over both kinds), paired conductor minus each other arm (positive = the Conductor helps).

    python -m experiments.mechanisms.maestro_bandit         # writes experiments/results/mechanisms_maestro_bandit.*
"""
import time

import torch

from benchmarks.paired import (PAIRED_HEADER, failure_probability, format_paired_row, format_probability,
                                          paired)
from experiments.mechanisms.report import environment, testbed_main
from rl.advantages import maestro
from rl.methods.maestro_conductor import ConductorLearner


CHANNELS = ("verifier_A", "verifier_B", "noise", "context")
KINDS = ("A", "B")
ALIGNED = {0: 0, 1: 1}          # kind -> channel aligned with its hidden utility
BEST_RESPONSE = {0: 0, 1: 1}    # kind -> the response the hidden utility wants
DECIDING_METRIC = ("after `steps` steps: per kind, the channel with the largest Conductor probability (over seeds) and "
                   "pi(aligned channel | kind); the actor's expected utility (mean over kinds), paired conductor - "
                   "other arm")
SETUP = {"groups": 8, "group_size": 4, "responses": 4, "eta": 0.5, "actor_lr": 2.0, "steps": 300}
ARMS = {"conductor": {"lr": 0.05, "update_interval": 1}, "conductor-paper-lr": {"lr": 5e-5, "update_interval": 3},
        "equal": None, "random": None}


def channel_rewards(kind: torch.Tensor, response: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """kind, response: Tensor[N] long -> Tensor[N, 4] rewards in the order of CHANNELS."""
    on_a = kind == 0
    verifier_a = torch.where(on_a, response == 0, response == 2).to(torch.float32)
    verifier_b = torch.where(on_a, response == 3, response == 1).to(torch.float32)
    noise = torch.bernoulli(torch.full(kind.shape, 0.5), generator=gen)
    context = on_a.to(torch.float32)
    return torch.stack([verifier_a, verifier_b, noise, context], dim=1)


def train(arm: str, seed: int, setup: dict = SETUP) -> dict:
    gen = torch.Generator().manual_seed(seed)
    g, n = setup["group_size"], setup["groups"] * setup["group_size"]
    group_ids = torch.arange(setup["groups"]).repeat_interleave(g)
    kind = (torch.arange(setup["groups"]) % 2).repeat_interleave(g)
    h = torch.nn.functional.one_hot(kind, 2).to(torch.float32)
    recipe = ARMS[arm]
    learner = ConductorLearner(2, len(CHANNELS), seed=seed, entropy_coef=1e-3,
                               **(recipe or {"lr": 5e-5, "update_interval": 3}))
    logits = torch.zeros(2, setup["responses"], dtype=torch.float64)
    for _ in range(setup["steps"]):
        pi = torch.softmax(logits, -1)
        response = torch.multinomial(pi[kind], 1, generator=gen).squeeze(1)
        rewards = channel_rewards(kind, response, gen)
        if recipe is not None:
            actions, _ = learner.act(h)
        elif arm == "random":
            actions = learner.random_actions(n)
        else:
            actions = None
        adv = maestro(rewards, actions, group_ids, eta=setup["eta"], reward_scale="none").to(torch.float64)
        if recipe is not None:
            learner.record(h, actions, adv.float())
        score_fn = torch.nn.functional.one_hot(response, setup["responses"]).to(torch.float64) - pi[kind]
        grad = torch.zeros_like(logits).index_put_((kind,), adv[:, None] * score_fn, accumulate=True)
        logits = logits + setup["actor_lr"] * grad / n
    pi = torch.softmax(logits, -1)
    utility = [float(pi[k, BEST_RESPONSE[k]]) for k in (0, 1)]
    out = {"utility": sum(utility) / 2, "utility_by_kind": dict(zip(KINDS, utility))}
    if recipe is not None:
        probs = learner.probs(torch.eye(2))
        out["conductor_probs"] = {KINDS[k]: dict(zip(CHANNELS, probs[k].tolist())) for k in (0, 1)}
        out["top_channel"] = {KINDS[k]: CHANNELS[int(probs[k].argmax())] for k in (0, 1)}
        out["aligned_prob"] = {KINDS[k]: float(probs[k, ALIGNED[k]]) for k in (0, 1)}
    return out


def run(seeds, arms=tuple(ARMS), setup: dict = SETUP) -> dict:
    t0 = time.time()
    runs = {a: [train(a, s, setup) for s in seeds] for a in arms}
    comparisons = {f"conductor vs {a}": paired([x["utility"] for x in runs["conductor"]], [x["utility"] for x in runs[a]])
                   for a in arms if a != "conductor"}
    top = {a: {k: {c: sum(x["top_channel"][k] == c for x in runs[a]) for c in CHANNELS} for k in KINDS}
           for a in arms if ARMS[a] is not None}
    return {"name": "maestro_bandit", "deciding_metric": DECIDING_METRIC, "seeds": list(seeds), "setup": setup,
            "arms": {a: ARMS[a] for a in arms}, "channels": CHANNELS, "aligned": {KINDS[k]: CHANNELS[c] for k, c in
                                                                                 ALIGNED.items()},
            "runs": runs, "top_channel_counts": top, "comparisons": comparisons, "seconds": time.time() - t0,
            "environment": environment()}


def _mean(xs):
    return sum(xs) / len(xs)


def report(result: dict) -> str:
    n = len(result["seeds"])
    lines = ["# Mechanism testbed: MAESTRO's Conductor on a contextual bandit (credo's `ConductorLearner` and "
             "`rl.advantages.maestro`)\n", f"Deciding metric (fixed before running): {result['deciding_metric']}.\n",
             f"Setup: {result['setup']}; arms {result['arms']}; {n} paired seeds; {result['seconds']:.0f} s. "
             f"Aligned channel per kind: {result['aligned']}.\n",
             "| arm | actor utility (A) | actor utility (B) | mean |", "|---|---|---|---|"]
    for a, xs in result["runs"].items():
        lines.append(f"| {a} | {_mean([x['utility_by_kind']['A'] for x in xs]):.3f} | "
                     f"{_mean([x['utility_by_kind']['B'] for x in xs]):.3f} | {_mean([x['utility'] for x in xs]):.3f} |")
    lines += ["\nConductor's final probabilities, mean over seeds, and how many seeds put the most weight on each "
              "channel:\n", "| arm | kind | " + " | ".join(result["channels"]) + " |",
              "|---|---|" + "---|" * len(result["channels"])]
    for a, counts in result["top_channel_counts"].items():
        for k, by_channel in counts.items():
            probs = [_mean([x["conductor_probs"][k][c] for x in result["runs"][a]]) for c in result["channels"]]
            cells = [f"{p:.3f} ({by_channel[c]}/{n})" for p, c in zip(probs, result["channels"])]
            lines.append(f"| {a} | {k} | " + " | ".join(cells) + " |")
    lines += ["\nPaired actor utility (a - b):\n", PAIRED_HEADER]
    lines += [format_paired_row(label, c) for label, c in result["comparisons"].items()]
    for label, c in result["comparisons"].items():
        lines.append(f"\n- {label}: chance that as many fresh seeds give a mean of the other sign: "
                     f"{format_probability(failure_probability(c['mean_diff'], c['sd_diff'], c['n']))}")
    return "\n".join(lines) + "\n"


def main():
    testbed_main(__doc__, "maestro_bandit", run, report, seeds=12)


if __name__ == "__main__":
    main()
