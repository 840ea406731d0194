"""TCPO vs MT-GRPO vs trajectory GRPO on a 3-turn refine task that goes on after success (tabular softmax policy).

Task. Every episode runs all TURNS turns (TCPO's protocol: refinement continues after a correct answer). The state
before a turn is one of
    U  unsolved            actions: attempt (solved with prob Q_ATTEMPT, score 1; else stays U, score 0)
                                    probe   (non-improving, score 0, leads to UP)
    UP unsolved, probed    actions: attempt (solved with prob Q_REPAIR, score 1; else back to U, score 0)
                                    probe   (stays UP, score 0)
    S  solved              actions: keep    (stays S, score 1)
                                    change  (breaks the answer: score 0, back to U; a regression)
The policy is a tabular softmax over the two actions of each state, starting uniform. The optimum among
state-based policies (found by enumeration, printed in the report) is probe in U, attempt in UP, keep in S:
a non-improving first turn that enables a later repair, and a solved answer kept.

Each step samples B prompts x G trajectories, scores turns, computes turn advantages A[i, k] with credo's own
functions and takes one REINFORCE step on sum_{i,k} A[i, k] grad log pi(a_ik | s_ik):
- `grpo-final`: rl.advantages.grpo on the final turn's score, the same advantage on every turn;
- `grpo-best`:  rl.advantages.grpo on the best turn's score (issue 18's "trajectory GRPO (best-turn score)");
- `mt_grpo`:    rl.advantages.mt_grpo (outcome = final turn, lambda 1);
- `tcpo`:       rl.advantages.tcpo with its defaults (tau 1, beta_pres 0.1, beta_reg 1, lambda_hind 1, gamma 0.9),
                hindsight alone (no fixed-history counterfactual);
- `tcpo+cf`:    the same plus credo's counterfactual step as train.py runs it by default (5 most surprising
                non-improving turns per batch, 4 alternatives each, cf_mix 0.5; see fixed_history_counterfactuals).

Deciding metrics, fixed before the first run: after STEPS steps, (1) the learned probability of keeping a solved
answer pi(keep | S) and (2) the exact final-turn success probability of the learned policy (computed from the
policy, no sampling noise); paired over seeds, TCPO minus each other method. Also reported: pi(probe | U) and the
best-turn success.

    python -m experiments.mechanisms.tcpo_refine            # writes experiments/results/mechanisms_tcpo_refine.*
"""
import itertools
import time

import torch

from benchmarks.paired import (PAIRED_HEADER, failure_probability, format_paired_row, format_probability,
                                          paired)
from experiments.mechanisms.report import environment, testbed_main
from rl.advantages import grpo, mt_grpo, tcpo
from rl.advantages.tcpo import eligible_turns  # what rl.methods.tcpo_counterfactuals.candidate_turns selects


U, UP, S = 0, 1, 2
STATE_NAMES = ("U", "UP", "S")
ACTION_NAMES = (("attempt", "probe"), ("attempt", "probe"), ("keep", "change"))
DECIDING_METRIC = ("after `steps` steps: pi(keep | solved) and the exact final-turn success probability of the "
                   "learned policy; paired TCPO - other method (positive = TCPO higher)")
SETUP = {"turns": 3, "q_attempt": 0.3, "q_repair": 0.9, "groups": 8, "group_size": 4, "lr": 0.1, "steps": 150}


def _broadcast(adv: torch.Tensor, turns: int) -> torch.Tensor:
    return adv[:, None].expand(-1, turns)


METHODS = {
    "grpo-final": lambda r, g: _broadcast(grpo(r[:, -1], g), r.shape[1]),
    "grpo-best": lambda r, g: _broadcast(grpo(r.max(1).values, g), r.shape[1]),
    "mt_grpo": lambda r, g: mt_grpo(r, g),
    "tcpo": lambda r, g: tcpo(r, g),
    "tcpo+cf": None,  # needs the trajectories' states: see fixed_history_counterfactuals
}
CF = {"budget": 5, "samples": 4}  # train.py's defaults: --tcpo_cf_budget 5 (topl), --tcpo_cf_samples 4, cf_mix 0.5


def fixed_history_counterfactuals(s, a, r, pi, setup, gen) -> torch.Tensor:
    """credo's counterfactual step (rl/methods/tcpo_counterfactuals.py) on the tabular task: among the turns
    rl.methods.tcpo_counterfactuals.candidate_turns selects (TCPO's eligible turns: non-improving and before success), the CF["budget"] most surprising (-log pi(a | s), the one-token
    analogue of the turn's mean NLL) get CF["samples"] alternatives drawn from pi(. | s) in the same state;
    cf = r - mean(alternative scores), NaN where the alternatives all scored the same or the turn was not chosen.
    """
    cf = torch.full_like(r, float("nan"))
    surprisal = -torch.log(pi[s, a])
    pairs = sorted(eligible_turns(r).nonzero().tolist(), key=lambda ik: -float(surprisal[ik[0], ik[1]]))
    for i, k in pairs[:CF["budget"]]:
        state = s[i, k].repeat(CF["samples"])
        alt = (torch.rand(CF["samples"], generator=gen, dtype=torch.float64) < pi[state, 1]).long()
        _, scores = transition(state, alt, torch.rand(CF["samples"], generator=gen, dtype=torch.float64), setup)
        if scores.max() > scores.min():
            cf[i, k] = r[i, k] - scores.mean()
    return cf


def transition(state: torch.Tensor, action: torch.Tensor, u: torch.Tensor, setup: dict):
    """One turn for every trajectory. state, action: Tensor[N] long; u: Tensor[N] uniform draws -> (state', score)."""
    solved_u = (state == U) & (action == 0) & (u < setup["q_attempt"])
    solved_up = (state == UP) & (action == 0) & (u < setup["q_repair"])
    kept = (state == S) & (action == 0)
    to_s = solved_u | solved_up | kept
    to_up = (state != S) & (action == 1)
    new_state = torch.where(to_s, torch.full_like(state, S), torch.where(to_up, torch.full_like(state, UP),
                                                                           torch.full_like(state, U)))
    return new_state, to_s.to(torch.float64)


def exact_success(pi: torch.Tensor, setup: dict):
    """(final-turn, best-turn) success probability of the policy pi: Tensor[3, 2] by forward recursion.

    The chain's state is (state, ever_solved); ever_solved only matters outside S.
    """
    qa, qr = setup["q_attempt"], setup["q_repair"]
    dist = {(U, False): 1.0}
    for _ in range(setup["turns"]):
        nxt = {}
        def add(key, p):
            nxt[key] = nxt.get(key, 0.0) + p
        for (s, ever), p in dist.items():
            a0, a1 = float(pi[s, 0]), float(pi[s, 1])
            if s == S:
                add((S, True), p * a0)
                add((U, True), p * a1)
            else:
                q = qa if s == U else qr
                add((S, True), p * a0 * q)
                add((U, ever), p * a0 * (1 - q))
                add((UP, ever), p * a1)
        dist = nxt
    final = sum(p for (s, _), p in dist.items() if s == S)
    best = sum(p for (s, ever), p in dist.items() if s == S or ever)
    return final, best


def optimum(setup: dict = SETUP):
    """The best deterministic state-based policy by enumeration: (final-turn success, action name per state)."""
    best = None
    for choice in itertools.product((0, 1), repeat=3):
        pi = torch.nn.functional.one_hot(torch.tensor(choice), 2).to(torch.float64)
        final, _ = exact_success(pi, setup)
        if best is None or final > best[0]:
            best = (final, {STATE_NAMES[s]: ACTION_NAMES[s][a] for s, a in enumerate(choice)})
    return best


def train(method: str, seed: int, setup: dict = SETUP) -> dict:
    gen = torch.Generator().manual_seed(seed)
    n, turns = setup["groups"] * setup["group_size"], setup["turns"]
    group_ids = torch.arange(setup["groups"]).repeat_interleave(setup["group_size"])
    logits = torch.zeros(3, 2, dtype=torch.float64)
    regressions = 0.0
    for _ in range(setup["steps"]):
        pi = torch.softmax(logits, -1)
        state = torch.full((n,), U, dtype=torch.long)
        states, actions, scores = [], [], []
        draws = torch.rand(2, turns, n, generator=gen, dtype=torch.float64)
        for k in range(turns):
            action = (draws[0, k] < pi[state, 1]).long()   # two actions: action 1 with probability pi[state, 1]
            states.append(state), actions.append(action)
            state, score = transition(state, action, draws[1, k], setup)
            scores.append(score)
        s, a, r = torch.stack(states, 1), torch.stack(actions, 1), torch.stack(scores, 1)   # [N, T]
        regressions += float(((s == S) & (a == 1)).sum())
        if method == "tcpo+cf":
            adv = tcpo(r, group_ids, counterfactual=fixed_history_counterfactuals(s, a, r, pi, setup, gen))
        else:
            adv = METHODS[method](r, group_ids)
        adv = adv.to(torch.float64)
        # grad of sum_{i,k} A log pi(a | s) w.r.t. logits[s] is A * (onehot(a) - pi[s])
        score_fn = torch.nn.functional.one_hot(a, 2).to(torch.float64) - pi[s]
        grad = torch.zeros_like(logits).index_put_((s.reshape(-1),), (adv[..., None] * score_fn).reshape(-1, 2),
                                                   accumulate=True)
        logits = logits + setup["lr"] * grad / (n * turns)
    pi = torch.softmax(logits, -1)
    final, best = exact_success(pi, setup)
    return {"keep": float(pi[S, 0]), "probe_in_U": float(pi[U, 1]), "attempt_in_UP": float(pi[UP, 0]),
            "final_success": final, "best_success": best, "regressions_sampled": regressions}


def run(seeds, methods=tuple(METHODS), setup: dict = SETUP) -> dict:
    t0 = time.time()
    runs = {m: [train(m, s, setup) for s in seeds] for m in methods}
    comparisons = {metric: {f"tcpo vs {m}": paired([x[metric] for x in runs["tcpo"]], [x[metric] for x in runs[m]])
                            for m in methods if m != "tcpo"} for metric in ("keep", "final_success")}
    initial = exact_success(torch.full((3, 2), 0.5, dtype=torch.float64), setup)
    opt_value, opt_policy = optimum(setup)
    return {"name": "tcpo_refine", "deciding_metric": DECIDING_METRIC, "seeds": list(seeds), "setup": setup,
            "initial": {"final_success": initial[0], "best_success": initial[1], "keep": 0.5},
            "optimum": {"final_success": opt_value, "policy": opt_policy}, "runs": runs, "comparisons": comparisons,
            "seconds": time.time() - t0, "environment": environment()}


def _mean(xs):
    return sum(xs) / len(xs)


def report(result: dict) -> str:
    opt, init = result["optimum"], result["initial"]
    lines = ["# Mechanism testbed: TCPO vs MT-GRPO vs trajectory GRPO on a 3-turn refine task that goes on after "
             "success\n", f"Deciding metric (fixed before running): {result['deciding_metric']}.\n",
             f"Setup: {result['setup']}; {len(result['seeds'])} paired seeds; {result['seconds']:.0f} s. "
             f"Uniform start: final-turn success {init['final_success']:.3f}, best-turn {init['best_success']:.3f}. "
             f"Optimum: {opt['policy']} with final-turn success {opt['final_success']:.3f}.\n",
             "| method | pi(keep \\| S) | pi(probe \\| U) | pi(attempt \\| UP) | final-turn success | best-turn success |",
             "|---|---|---|---|---|---|"]
    for m, xs in result["runs"].items():
        lines.append(f"| {m} | {_mean([x['keep'] for x in xs]):.3f} | {_mean([x['probe_in_U'] for x in xs]):.3f} | "
                     f"{_mean([x['attempt_in_UP'] for x in xs]):.3f} | {_mean([x['final_success'] for x in xs]):.3f} "
                     f"| {_mean([x['best_success'] for x in xs]):.3f} |")
    for metric, comps in result["comparisons"].items():
        lines += [f"\nPaired {metric} (a - b):\n", PAIRED_HEADER]
        lines += [format_paired_row(label, c) for label, c in comps.items()]
        for label, c in comps.items():
            lines.append(f"\n- {label}: chance that as many fresh seeds give a mean of the other sign: "
                         f"{format_probability(failure_probability(c['mean_diff'], c['sd_diff'], c['n']))}")
    return "\n".join(lines) + "\n"


def main():
    testbed_main(__doc__, "tcpo_refine", run, report, seeds=8)


if __name__ == "__main__":
    main()
