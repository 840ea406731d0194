"""What does MAESTRO's meta-reward favour on a real run's batches? The expected signal per emphasis action,
recomputed from every response a run logged, under the run's own advantage maths and under counterfactual ones.

Why (issue 42): with the rewards on one scale (--maestro_reward_scale batch_rank) the level effect that explained the
first sweep's collapse is gone (every reward has batch mean 0.5), yet the rerun's Conductor still moved onto `len` for
both prompt kinds on 3 of 3 seeds, and the highest early level predicted the choice on 0 of 6 seed-kinds. The Conductor
is REINFORCE on the GRPO advantages its actions produced, so what it learns is decided by

    D_k = E[A_i | a_i = k] - E_{a_i ~ pi}[A_i],     the others' actions a_-i ~ pi, the responses as sampled,

the advantage of emphasising reward k over the policy's average (its softmax logit for k moves by about pi_k D_k).
This script computes D_k per prompt kind and step from a run's completions.jsonl (train.py --log_completions >= the
batch: every row's components, group, kind, emphasis action and advantage), with credo's own rl.advantages code:
  as run:            the rewards as the run mixed them (batch_rank), GRPO's group std scaling (the run's flags);
  no std:            the same rewards, --scale_rewards none (Dr.GRPO): the exact level formula of
                     rl/advantages/maestro.py, eta (1 - 1/G) (mu_gk - sum_j pi_j mu_gj), averaged over groups;
  group rank:        every reward ranked within its group instead of the batch (each reward has level 0.5 in every
                     group, so no reward can win by a group's level), group std scaling;
  group rank, no std: both (D = 0 up to Monte Carlo noise: a control of the estimator).
Each response is evaluated at its own logged pi(. | h_i) (completions' extras "pi"; a run without it at its kind's
logged mean conductor/pi/<kind>/<reward>, the context-only part of the Conductor). First the reconstruction is
checked: the run's logged advantages must equal the recomputed ones for the logged actions (otherwise the rows, the
reward order or the flags are not the run's, and the script stops).

Signal or drift. The Conductor's REINFORCE gradient on its logit k (on the bias b_k, which every prompt kind
shares) is mean_i A_i (1[a_i = k] - pi_ik) for the actions the run drew, with expectation mean_i pi_ik D_ik. Summed
over steps, their difference is what the draws of the Conductor's own actions added (noise), with its SE from the
steps' spread: when that is larger than the expected part, which reward the Conductor ends on is decided by the draws.
This part, and the rows over all responses `(all)`, were added after a first look at the logged seed-1 rerun (whose
Conductor ended on `ent`, not `len`); they are not part of the deciding metric below.

Deciding metric, fixed before the first analysis: per condition and kind, the reward with the highest mean D over
steps 1-10 (pi still near uniform there), with the mean +- SE over those steps of every reward's D; the mechanism is
identified by the condition under which `len`'s lead disappears.

Reversed sign (issue 49, added after the analyses above): `--flip ent` replaces a reward's logged component by
1 - value once the run is reconstructed. For a reward that is rank-normalised within its group (`ppl`, `ent`, `pref`:
rewards/policy_rewards.group_rank_normalize, ties at their mean rank) that is exactly its value under the opposite
sign, so the logged runs, all trained while credo's `ent` had EM-GRPO's sign, are scored with MAESTRO's. It is a
counterfactual: the responses, the logged pi and the drawn actions stay the run's (step 1's batch is the base model's,
the same under either sign for the same seed; later batches came from a policy trained with the old sign), and the
drawn part of the gradient is recomputed from those actions with the flipped reward.

    python -m experiments.mechanisms.maestro_meta_reward RUN_DIR [--results PREFIX] [--flip ent]
"""
import argparse
import gzip
import json
import math
import os

import torch

from benchmarks.archive_pack import unpacked
from experiments.mechanisms.report import environment, write
from rl.advantages.grpo import grpo
from rl.advantages.maestro import batch_rank, emphasis_weights, maestro, mixed_reward

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONDITIONS = {"as run": ("batch", "group"), "no std": ("batch", "none"), "group rank": ("group", "group"),
              "group rank, no std": ("group", "none")}   # name -> (where the rewards are ranked, --scale_rewards)
ALL = "(all)"   # the whole batch: what moves the Conductor's bias, which every prompt kind shares
DECIDING_METRIC = ("per condition and kind: the reward with the highest mean D_k = E[A | a = k] - E_pi[A] over steps "
                   "1-10, and every reward's mean +- SE over those steps")


def read_jsonl(path: str) -> list:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def find(run_dir: str, name: str) -> str:
    for candidate in (os.path.join(run_dir, name), os.path.join(run_dir, "train", name),
                      os.path.join(run_dir, name + ".gz"), os.path.join(run_dir, "train", name + ".gz")):
        if os.path.exists(candidate):
            return candidate
    raise SystemExit(f"{run_dir}: no {name} (train.py's OUTPUT_DIR, or an archived run's train/ folder)")


def load_steps(run_dir: str, rewards: list) -> dict:
    """{step: dict(rewards Tensor[N, K], group_ids, kinds, actions, advantages, pi {kind: Tensor[K]})} for every step
    whose every row was logged (an action per row, each group whole)."""
    rows, metrics = read_jsonl(find(run_dir, "completions.jsonl")), read_jsonl(find(run_dir, "metrics.jsonl"))
    by_step = {}
    for r in rows:
        by_step.setdefault(r["step"], []).append(r)
    metric = {m["step"]: m for m in metrics}
    steps = {}
    for step, rs in sorted(by_step.items()):
        if any("actions" not in (r.get("extras") or {}) or r.get("kind") is None for r in rs):
            raise SystemExit(f"{run_dir}: step {step}'s completions carry no emphasis action or kind: run train.py "
                             "--algo maestro --maestro_weights conductor --log_completions >= the batch (at this commit)")
        groups = torch.tensor([r["group"] for r in rs])
        sizes = torch.bincount(groups - groups.min())
        if len(set(sizes[sizes > 0].tolist())) != 1:
            raise SystemExit(f"{run_dir}: step {step} logged only part of its groups; --log_completions must be >= the batch")
        kinds = [r["kind"] for r in rs]
        pi = {k: torch.tensor([metric[step][f"conductor/pi/{k}/{name}"] for name in rewards]) for k in set(kinds)}
        # each response's own pi(. | h_i) where the run logged it (extras "pi"), else its kind's mean (context only)
        probs = torch.tensor([r["extras"]["pi"] if "pi" in r["extras"] else pi[r["kind"]].tolist() for r in rs])
        steps[step] = {"rewards": torch.tensor([[float("nan") if r["components"][n] is None else r["components"][n]
                                                 for n in rewards] for r in rs]),
                       "group_ids": groups, "kinds": kinds, "actions": torch.tensor([r["extras"]["actions"] for r in rs]),
                       "advantages": torch.tensor([r["advantage"] for r in rs]), "pi": pi, "probs": probs,
                       "per_response_pi": all("pi" in r["extras"] for r in rs)}
    return steps


def group_rank(values: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """batch_rank within each group: every reward's mean is 0.5 in every group. Tensor[N, K] -> Tensor[N, K]."""
    out = torch.empty_like(values, dtype=torch.float32)
    for g in group_ids.unique():
        rows = group_ids == g
        out[rows] = batch_rank(values[rows])
    return out


def meta_signal(scaled: torch.Tensor, group_ids: torch.Tensor, probs: torch.Tensor, eta: float, grpo_scale: str,
                draws: int, gen: torch.Generator) -> torch.Tensor:
    """Tensor[N, K] float64: D_ik = E[A_i | a_i = k] - E_pi[A_i], each response's own. scaled: Tensor[N, K] the
    rewards as mixed; probs: Tensor[N, K] each response's pi. Over `draws` action vectors a ~ pi: for each response i
    and action k, A_i with a_i set to k."""
    n, k = scaled.shape
    probs = probs / probs.sum(1, keepdim=True)
    total = torch.zeros(n, k, dtype=torch.float64)
    for _ in range(draws):
        actions = torch.multinomial(probs, 1, generator=gen).squeeze(1)
        base = mixed_reward(scaled, emphasis_weights(actions, k, eta))
        per_action = torch.zeros(n, k, dtype=torch.float64)               # A_i(a_i := k)
        for j in range(k):
            for i in range(n):
                s = base.clone()
                s[i] = mixed_reward(scaled[i:i + 1], emphasis_weights(torch.tensor([j]), k, eta))[0]
                per_action[i, j] = grpo(s, group_ids, scale=grpo_scale)[i]
        total += (per_action - (per_action * probs).sum(1, keepdim=True)) / draws
    return total


def by_kind(values: torch.Tensor, kinds: list) -> dict:
    """{kind: list[K]} the mean of Tensor[N, K] over each kind's rows, and over all rows (ALL)."""
    out = {}
    for kind in sorted(set(kinds)) + [ALL]:
        rows = torch.tensor([x == kind or kind == ALL for x in kinds])
        out[kind] = values[rows].mean(0).tolist()
    return out


def realized_gradient(advantages: torch.Tensor, actions: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """Tensor[N, K]: A_i (1[a_i = k] - pi_ik), each response's term of the REINFORCE gradient on the Conductor's
    logit k, as the run drew its actions (its mean over the batch is the gradient on the shared bias b_k)."""
    onehot = torch.nn.functional.one_hot(actions.long(), probs.shape[1]).to(torch.float64)
    return advantages.to(torch.float64).unsqueeze(1) * (onehot - probs.to(torch.float64))


def run_meta_reward(run_dir: str) -> str:
    """The run's --maestro_meta_reward (the flags in train.py's config.json; `advantage`, the default, for a run from
    before the flag or without a config.json)."""
    for path in (os.path.join(run_dir, "config.json"), os.path.join(run_dir, "train", "config.json")):
        if os.path.exists(path):
            with open(path) as f:
                config = json.load(f)
            if "flags" not in config:
                raise SystemExit(f"{path}: no `flags` (not a train.py config.json)")
            return config["flags"].get("maestro_meta_reward", "advantage")
    return "advantage"


def flip(rewards: torch.Tensor, columns: list) -> torch.Tensor:
    """Tensor[N, K] with the given columns replaced by 1 - value: a group-rank-normalised reward under the opposite
    sign (rank(-x) = (G - 1) - rank(x), ties included; NaN stays NaN). Tensor[N, K] -> Tensor[N, K]."""
    out = rewards.clone()
    out[:, columns] = 1.0 - out[:, columns]
    return out


def analyse(run_dir: str, rewards: list, eta: float, draws: int, seed: int = 0, flipped: tuple = ()) -> dict:
    """D_k per condition, and the Conductor's bias gradient under the meta-reward the run used: the GRPO advantage
    (`advantage`: the 'as run' condition) or the group-centred mixed reward (`centred`: the 'no std' one).
    flipped: rewards scored with the opposite sign once the run is reconstructed (module docstring)."""
    unknown = [name for name in flipped if name not in rewards]
    if unknown:
        raise SystemExit(f"--flip {','.join(unknown)}: not among the run's rewards {','.join(rewards)}")
    steps = load_steps(run_dir, rewards)
    meta = run_meta_reward(run_dir)
    conductor_condition = "as run" if meta == "advantage" else "no std"
    gen = torch.Generator().manual_seed(seed)
    worst = 0.0
    out = {c: {} for c in CONDITIONS}
    expected, realized = {}, {}
    for step, s in steps.items():
        recomputed = maestro(s["rewards"], s["actions"], s["group_ids"], eta=eta, scale="group", reward_scale="batch_rank")
        worst = max(worst, float((recomputed - s["advantages"]).abs().max()))
        if worst > 1e-4:
            raise SystemExit(f"{run_dir}: step {step}'s logged advantages differ from the recomputed ones by {worst:.2g}: "
                             f"not the run's rows, reward order ({','.join(rewards)}), eta or --scale_rewards group")
        if flipped:   # the run's draws scored with the reversed rewards: what the meta-reward would have returned
            s["rewards"] = flip(s["rewards"], [rewards.index(name) for name in flipped])
            s["advantages"] = maestro(s["rewards"], s["actions"], s["group_ids"], eta=eta, scale="group",
                                      reward_scale="batch_rank")
        for cond, (where, grpo_scale) in CONDITIONS.items():
            scaled = batch_rank(s["rewards"]) if where == "batch" else group_rank(s["rewards"], s["group_ids"])
            d = meta_signal(scaled, s["group_ids"], s["probs"], eta, grpo_scale, draws, gen)
            out[cond][step] = by_kind(d, s["kinds"])
            if cond == conductor_condition:   # the gradient's expectation pi_ik D_ik, and what the run's draws gave
                expected[step] = by_kind(s["probs"].to(torch.float64) * d, s["kinds"])
                signal = s["advantages"] if meta == "advantage" else grpo(
                    mixed_reward(scaled, emphasis_weights(s["actions"], len(rewards), eta)), s["group_ids"], scale="none")
                realized[step] = by_kind(realized_gradient(signal, s["actions"], s["probs"]), s["kinds"])
    pi = {step: {kind: v.tolist() for kind, v in sorted(s["pi"].items())} for step, s in steps.items()}
    return {"name": "maestro_meta_reward", "run": os.path.relpath(os.path.abspath(run_dir), REPO),
            "deciding_metric": DECIDING_METRIC, "rewards": rewards, "eta": eta, "draws": draws, "meta_reward": meta,
            "flipped": list(flipped),
            "per_response_pi": all(s["per_response_pi"] for s in steps.values()),
            "reconstruction_max_abs_error": worst, "steps": sorted(steps), "signal": out, "pi": pi,
            "gradient": {"expected": expected, "realized": realized}, "environment": environment()}


def window_stats(signal: dict, kind: str, first: int, last: int, k: int) -> list:
    """[(mean, se)] per reward of D over steps first..last."""
    rows = torch.tensor([v[kind] for step, v in signal.items() if first <= int(step) <= last], dtype=torch.float64)
    se = rows.std(0) / math.sqrt(len(rows)) if len(rows) > 1 else torch.full((k,), float("nan"))
    return list(zip(rows.mean(0).tolist(), se.tolist()))


def cumulative(gradient: dict, first: int, last: int, j: int) -> tuple:
    """(sum of expected, (sum of realized, SE of the summed drift)) over steps first..last for reward j, all rows."""
    pick = [t for t in gradient["expected"] if first <= int(t) <= last]   # int keys, or str ones read from JSON
    e = torch.tensor([gradient["expected"][t][ALL][j] for t in pick], dtype=torch.float64)
    r = torch.tensor([gradient["realized"][t][ALL][j] for t in pick], dtype=torch.float64)
    se = float((r - e).std() * math.sqrt(len(pick))) if len(pick) > 1 else float("nan")
    return float(e.sum()), (float(r.sum()), se)


def report(result: dict) -> str:
    names, k = result["rewards"], len(result["rewards"])
    kinds = sorted(next(iter(result["signal"]["as run"].values())))
    last = max(result["steps"])
    lines = ["# MAESTRO's meta-reward on a real run's batches: what each emphasis action is worth\n",
             f"`python -m experiments.mechanisms.maestro_meta_reward {result['run']}"
             + (f" --flip {','.join(result['flipped'])}" if result.get("flipped") else "") + "`\n",
             f"Deciding metric (fixed before the analysis): {result['deciding_metric']}.\n",
             f"D_k = E[A_i | a_i = k] - E_pi[A_i] over the kind's responses, the other responses' actions drawn from "
             f"that step's logged pi ({result['draws']} draws a step), eta {result['eta']}; rewards {names}. The run's "
             f"logged advantages are reproduced to {result['reconstruction_max_abs_error']:.1e} from its logged rows "
             f"and actions. Positive D_k: emphasising k raises the response's advantage, so the Conductor moves toward k.\n"]
    if result.get("flipped"):
        lines.append(f"**Reversed sign: {', '.join(result['flipped'])}** scored as 1 - its logged value after the "
                     "reconstruction (the opposite sign of a group-ranked reward). A counterfactual: the responses, the "
                     "logged pi and the drawn actions are the run's, trained with the other sign; step 1's batch is the "
                     "base model's under either sign.\n")
    for first, to in [(1, min(10, last))] + ([(11, last)] if last > 10 else []):
        lines += [f"\n## Steps {first}-{to}: mean D_k ± SE over steps\n",
                  "| condition | kind | " + " | ".join(names) + " | highest |", "|---" * (k + 3) + "|"]
        for cond in CONDITIONS:
            for kind in kinds:
                stats = window_stats(result["signal"][cond], kind, first, to, k)
                top = names[max(range(k), key=lambda j: stats[j][0])]
                lines.append(f"| {cond} | {kind} | " + " | ".join(f"{m:+.4f} ± {s:.4f}" for m, s in stats)
                             + f" | {top} |")
    lines += ["\n## Signal or drift: the gradient on the Conductor's shared bias, summed over steps (all responses)\n",
              f"The run's --maestro_meta_reward: {result.get('meta_reward', 'advantage')}. expected = sum over steps "
              f"of mean_i pi_ik D_ik (what that meta-reward pushes for: the "
              f"'{'as run' if result.get('meta_reward', 'advantage') == 'advantage' else 'no std'}' D); realized = "
              "sum of mean_i A_i (1[a_i = k] - pi_ik) with the actions the run drew; drift = realized - expected, "
              "± its SE (the steps' residual sd x sqrt(steps)). Positive: toward k.\n",
              "| steps | reward | expected | realized | drift ± SE |", "|---|---|---|---|---|"]
    for first, to in [(1, min(10, last))] + ([(1, last)] if last > 10 else []):
        for j, name in enumerate(names):
            e, r = cumulative(result["gradient"], first, to, j)
            lines.append(f"| {first}-{to} | {name} | {e:+.4f} | {r[0]:+.4f} | {r[0] - e:+.4f} ± {r[1]:.4f} |")
    lines += ["\n## The logged pi (the run's Conductor) at steps 1, 10, 20 and the last\n",
              "| step | kind | " + " | ".join(names) + " |", "|---" * (k + 2) + "|"]
    for step in [s for s in (1, 10, 20, last) if str(s) in result["pi"] or s in result["pi"]]:
        row = result["pi"].get(step) or result["pi"].get(str(step))
        for kind in sorted(row):
            lines.append(f"| {step} | {kind} | " + " | ".join(f"{p:.3f}" for p in row[kind]) + " |")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", help="train.py's OUTPUT_DIR (or an archived run) with completions of every row")
    p.add_argument("--rewards", default="fmt,ppl,ent,len", help="the run's Conductor actions in order "
                   "(--maestro_rewards less pref without a reward model; default fmt,ppl,ent,len)")
    p.add_argument("--eta", type=float, default=0.5, help="the run's --maestro_emphasis (default 0.5)")
    p.add_argument("--draws", type=int, default=32, help="action vectors drawn from pi per step (default 32)")
    p.add_argument("--results", default=os.path.join(REPO, "experiments", "results", "mechanisms_maestro_meta_reward"),
                   help="output prefix for .json and .md")
    p.add_argument("--flip", default="", help="rewards scored with the opposite sign, comma list (e.g. ent: a run "
                   "from before e1a54e2 read at MAESTRO's sign; module docstring); default none")
    a = p.parse_args()
    torch.set_num_threads(1)
    flipped = tuple(n.strip() for n in a.flip.split(",") if n.strip())
    unpacked(a.run_dir)  # a run inside a committed archive (experiments/results/archive/NAME.tar.gz): unpacked first
    write(analyse(a.run_dir, a.rewards.split(","), a.eta, a.draws, flipped=flipped), a.results, report)


if __name__ == "__main__":
    main()
