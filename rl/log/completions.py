"""A few of each step's completions, as TRL's `log_completions` and verl's logged generations show them: one JSON
record each for OUTPUT_DIR/completions.jsonl, and a markdown table for TensorBoard's text tab."""
import math

import torch


def pick_rows(n: int, count: int) -> list:
    """`count` rows spread evenly over a batch of n (rows come in groups of one prompt: spreading them shows
    different prompts rather than one prompt's G samples)."""
    count = min(count, n)
    return [k * n // count for k in range(count)]


def _number(value):
    value = float(value)
    return value if math.isfinite(value) else None


def _numbers(value):
    """A tensor's .tolist(): a number, or nested lists of them, non-finite ones as None (strict JSON)."""
    return [_numbers(v) for v in value] if isinstance(value, list) else _number(value)


def completion_records(batch, count: int) -> list:
    """Records of `count` trajectories of a scored Rollout with its advantages: prompt, final completion, the
    reward and its components, the advantage (one per turn for turn-level methods), the method's own per-response
    data (`extras`: MAESTRO's emphasis action, an index into its reward list, and its pi; TCPO's counterfactual
    scores per turn), the prompt's `kind` where the env gives one, and for multi-turn episodes every turn's text and
    score, and the env's episode_record() where it has one. With count >= the batch, every row: enough to recompute a step's advantages offline
    (experiments/mechanisms/maestro_meta_reward.py does)."""
    if count <= 0 or len(batch) == 0:
        return []
    records = []
    for i in pick_rows(len(batch), count):
        turn_scores = [s for s in batch.turn_scores[i].tolist() if s == s] if batch.turn_scores is not None else []
        advantage = batch.advantages[i] if batch.advantages is not None else torch.tensor(float("nan"))
        if advantage.dim():  # turn-level methods: one advantage per turn played
            advantage = [_number(a) for a in advantage[:len(turn_scores)].tolist()]
        else:
            advantage = _number(advantage)
        record = {"group": int(batch.group_ids[i]), "prompt": batch.prompts[i] if batch.prompts else None,
                  "completion": batch.completions[i],
                  "reward": _number(batch.scores[i]) if batch.scores is not None else None,
                  "components": {k: _number(v[i]) for k, v in batch.components.items()},
                  "advantage": advantage, "turn_scores": turn_scores}
        kind = batch.samples[i].get("kind") if batch.samples else None
        if kind is not None:  # the prompt's kind (--env mixed: arith / describe), as eval.py's pass@1/<kind> uses
            record["kind"] = kind
        if batch.extras:
            record["extras"] = {k: _numbers(v[i].tolist()) for k, v in sorted(batch.extras.items())}
        if len(turn_scores) > 1 and batch.conversations:
            record["turns"] = [m["content"] for m in batch.conversations[i] if m["role"] == "assistant"]
        episode = batch.envs[i].episode_record() if batch.envs and hasattr(batch.envs[i], "episode_record") else {}
        if episode:  # the env's own account of the episode (--env toolcall: why a parse failed, the question's id)
            record["env"] = episode
        records.append(record)
    return records


def markdown_table(records: list) -> str:
    """TensorBoard renders text entries as markdown: one row per completion."""
    def cell(value):
        return str(value).replace("|", "\\|").replace("\n", "<br>")

    lines = ["| group | prompt | completion | reward | advantage |", "|---|---|---|---|---|"]
    lines += [f"| {r['group']} | {cell(r['prompt'])} | {cell(r['completion'])} | {cell(r['reward'])} | "
              f"{cell(r['advantage'])} |" for r in records]
    return "\n".join(lines)
