"""Can DARA's weights act at a given batch? A pre-run check from the warm start's own samples (issue #61 item 4).

    python experiments/dara_weight_check.py RESULTS_JSON [--prompts 4,8,16] [--steps 2000]

RESULTS_JSON: a sampled eval of the warm start (eval.py --n 4 at the RL temperature; the warm-start sweep's
`toolcall/eval/step_N_sampled/results.json`), whose questions are 4-response groups scored by tool_format and
tool_correct. For each prompts-per-step P it draws steps of P groups (questions drawn with replacement, seeded) and
computes DARA-Asym's weights on the two rewards exactly as training does (rl/advantages/dara.py). DARA's weights
differ from 1 only when both rewards are active (non-constant) in some group of the step and in different numbers of
groups; the report gives the share of steps where they do, and which reward was up-weighted. A sweep at a batch where
that share is small compares DARA with GDPO where DARA is GDPO.
"""
import argparse
import json
import random

import torch

from rl.advantages.dara import dara


def groups_of(results: dict) -> list:
    """[[(tool_format, tool_correct)] x 4] per question."""
    return [[(float(e["format"]), float(e["correct"])) for e in p.get("episodes", [])] for p in results["problems"]]


def weight_moves(groups: list, prompts: int, steps: int, seed: int = 0) -> dict:
    rng = random.Random(seed)
    moved = {"any": 0, "tool_format": 0, "tool_correct": 0}
    for _ in range(steps):
        drawn = [rng.choice(groups) for _ in range(prompts)]
        components = torch.tensor([s for g in drawn for s in g], dtype=torch.float64)
        group_ids = torch.tensor([i for i, g in enumerate(drawn) for _ in g])
        _, info = dara(components, group_ids, variant="asym")
        w = info["w"]
        moved["any"] += int(bool((w != 1).any()))
        moved["tool_format"] += int(w[0] > 1)
        moved["tool_correct"] += int(w[1] > 1)
    return {k: v / steps for k, v in moved.items()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("results")
    p.add_argument("--prompts", default="4,8,16")
    p.add_argument("--steps", type=int, default=2000)
    a = p.parse_args(argv)
    with open(a.results) as f:
        results = json.load(f)
    try:
        groups = [g for g in groups_of(results) if g]
    except (KeyError, TypeError):
        raise SystemExit(f"dara_weight_check.py: {a.results} is not a toolcall eval's results.json (problems with "
                         "episodes scored by format and correct)") from None
    if not groups or min(len(g) for g in groups) < 2:
        raise SystemExit(f"dara_weight_check.py: {a.results} has no groups of 2 or more responses (eval.py --n 4)")
    print(f"{len(groups)} groups of {len(groups[0])} from {a.results}")
    print("| prompts per step | steps with a DARA weight != 1 | tool_format up-weighted | tool_correct up-weighted |")
    print("|---|---|---|---|")
    for prompts in (int(x) for x in a.prompts.split(",")):
        m = weight_moves(groups, prompts, a.steps)
        print(f"| {prompts} | {m['any']:.2f} | {m['tool_format']:.2f} | {m['tool_correct']:.2f} |")


if __name__ == "__main__":
    main()
