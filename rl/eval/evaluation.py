"""Evaluation: playing the episodes (eval.py's and train.py's --eval_steps share `evaluate`) and the metrics over
sampled (multi-turn) attempts: pass@k, best-turn pass@k, success by turn.

Each problem has n samples; each sample has `correct_by_turn`, one 0/1 per turn it took (and optionally
`score_by_turn`, the verifier's graded score of each turn). A sample's *final* correctness is its last turn's; its
*best-turn* correctness is whether any turn was correct. Under --episode_end success the two agree (an episode stops
at its first success); under --episode_end max_turns they differ by the solutions later turns broke, which is what
`regression_rate` counts.
"""
import os
from dataclasses import dataclass
from math import comb

import torch
from tqdm import tqdm

from envs.base import SUCCESS_THRESHOLD
from rl.rollout.episode_end import env_kwargs
from rl.log.refinement_metrics import transition_rates


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem (Chen et al. 2021): 1 - C(n - c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per problem, got n = {n}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def aggregate(problems: list, ks: list, max_turns: int) -> dict:
    """Metrics (fractions in [0, 1]) averaged over problems.

    problems: [{"correct_by_turn": [[0, 1], [0, 0], ...], optional "score_by_turn": [[0.3, 1.0], ...]}, ...] with the
    same n for every problem.

    pass@k is the final turn's (also `final_turn_pass@k` with max_turns > 1, to sit next to best_turn_pass@k);
    preservation_rate / regression_rate: of the turns that followed a correct turn, the share still / no longer
    correct (NaN when no turn followed a correct one, as under --episode_end success); avg_turns_to_success: the
    mean first correct turn of the samples that had one; mean_final_score / mean_best_score: the graded scores.
    """
    if not problems:
        raise ValueError("no problems to aggregate")
    n = len(problems[0]["correct_by_turn"])
    for k in ks:
        if k > n:
            raise ValueError(f"--k {k} is larger than --n {n}: pass@{k} needs at least {k} samples per problem")
    metrics = {}
    finals = [[int(bool(s) and s[-1] == 1) for s in p["correct_by_turn"]] for p in problems]
    bests = [[int(any(s)) for s in p["correct_by_turn"]] for p in problems]
    for k in ks:
        metrics[f"pass@{k}"] = sum(pass_at_k(n, sum(f), k) for f in finals) / len(problems)
        metrics[f"best_turn_pass@{k}"] = sum(pass_at_k(n, sum(b), k) for b in bests) / len(problems)
        if max_turns > 1:
            metrics[f"final_turn_pass@{k}"] = metrics[f"pass@{k}"]
    samples = [s for p in problems for s in p["correct_by_turn"]]
    first_success = [next((t for t, ok in enumerate(s) if ok), None) for s in samples]
    for k in range(max_turns):
        metrics[f"success_by_turn/{k + 1}"] = sum(f is not None and f <= k for f in first_success) / len(samples)
    solved = [f + 1 for f in first_success if f is not None]
    metrics["avg_turns_to_success"] = sum(solved) / len(solved) if solved else float("nan")
    metrics["success_rate"] = len(solved) / len(samples)
    metrics[f"mean@{n}"] = sum(sum(f) for f in finals) / len(samples)
    if max_turns > 1:
        rates = transition_rates(samples)
        metrics["preservation_rate"], metrics["regression_rate"] = rates["preservation_rate"], rates["regression_rate"]
    graded = [s for p in problems for s in p.get("score_by_turn", [])]
    if graded:
        metrics["mean_final_score"] = sum(s[-1] if s else 0.0 for s in graded) / len(graded)
        metrics["mean_best_score"] = sum(max(s) if s else 0.0 for s in graded) / len(graded)
    return metrics


@dataclass(frozen=True)
class EvalSettings:
    """What `evaluate` reads of the flags: built from eval.py's by `from_args`, from train.py's (--eval_steps) by
    rl.eval.validation.PeriodicValidation.from_args."""
    env_cls: type
    n: int                # samples per problem (eval.py --n, train.py --eval_n)
    batch_size: int       # samples per generate call
    prompt_key: str
    answer_key: str
    max_turns: int
    max_prompt_seq_len: int  # a longer first prompt is left-truncated
    env_kwargs: dict      # the episode end, for verify-and-refine envs only (rl.rollout.episode_end.env_kwargs)
    env_settings: dict    # the env's own flags (Env.settings_from_args)
    code_workers: int = 1  # env steps run in parallel (train.py's --code_workers; eval.py has no such flag)

    @classmethod
    def from_args(cls, args, n: int = None) -> "EvalSettings":
        """`args` holds env_cls (eval.py's validate sets it) and the env's flags; `n` overrides args.n."""
        return cls(env_cls=args.env_cls, n=args.n if n is None else n, batch_size=args.batch_size,
                   prompt_key=args.prompt_key, answer_key=args.answer_key, max_turns=args.max_turns,
                   max_prompt_seq_len=args.max_prompt_seq_len,
                   env_kwargs=env_kwargs(getattr(args, "episode_end", "success"), args.env_cls),
                   env_settings=args.env_cls.settings_from_args(args),
                   code_workers=getattr(args, "code_workers", 1))

    def make_env(self, verifier):
        return self.env_cls(verifier=verifier, prompt_key=self.prompt_key, answer_key=self.answer_key,
                            max_turns=self.max_turns, **self.env_kwargs, **self.env_settings)


def evaluate(sampler, tokenizer, rows, settings: EvalSettings, show_progress: bool = True,
             indices: list = None, rewards=None) -> list:
    """Play n episodes per problem with `sampler` (rl.rollout.samplers.make_sampler: greedy at temperature 0);
    return one record per problem with correct_by_turn and the responses.

    `indices` are the rows' positions in the whole eval set (a rank's shard), the default id of a row without one.
    `rewards` (rl.eval.eval_rewards.EvalRewards, eval.py --reward_funcs) adds each sample's reward components under
    "rewards".
    """
    from rl.rollout.episodes import EpisodeSettings, run_episodes  # here: the metrics above need no model stack
    indices = list(range(len(rows))) if indices is None else indices
    verifier = settings.env_cls.make_verifier(answer_key=settings.answer_key)
    episode_settings = EpisodeSettings(max_turns=settings.max_turns, max_prompt_seq_len=settings.max_prompt_seq_len,
                                       code_workers=settings.code_workers)
    n = settings.n
    samples = [(p, row) for p, row in enumerate(rows) for _ in range(n)]
    problems = [{"id": row.get("id", i), "answer": row.get(settings.answer_key), "correct_by_turn": [],
                 "score_by_turn": [], "responses": []}
                for i, row in zip(indices, rows)]
    done = correct = 0
    # One update per batch, rated over the whole run (smoothing=0): per-problem updates all land at the end of a
    # batch, and tqdm's moving average then read one batch's seconds as each problem's (an ETA of hours).
    bar = tqdm(total=len(rows), desc="eval", unit="problem", dynamic_ncols=True, smoothing=0,
               disable=not show_progress)
    for start in range(0, len(samples), settings.batch_size):
        chunk = samples[start:start + settings.batch_size]
        envs = [settings.make_env(verifier) for _ in chunk]
        batch = run_episodes(sampler, tokenizer, envs, [row for _, row in chunk], torch.tensor([p for p, _ in chunk]),
                             lambda env, text: env.step(text), episode_settings, {})
        scored = rewards.score(batch) if rewards is not None else [None] * len(chunk)
        for (p, _), env, scores, conversation, components in zip(chunk, envs, batch.turn_scores.tolist(),
                                                                  batch.conversations, scored):
            if components is not None:
                problems[p].setdefault("rewards", []).append(components)
            taken = [s for s in scores if s == s]  # drop NaN (turns not taken)
            record = env.episode_record()  # env-specific extras (AppWorld: task id, checks passed)
            if record:
                problems[p].setdefault("episodes", []).append({**record, "sample": len(problems[p]["correct_by_turn"])})
            problems[p]["correct_by_turn"].append([int(s >= SUCCESS_THRESHOLD) for s in taken])
            problems[p]["score_by_turn"].append(taken)
            problems[p]["responses"].append([m["content"] for m in conversation if m["role"] == "assistant"])
            if len(problems[p]["correct_by_turn"]) == n:
                done += 1
                correct += sum(s[-1] for s in problems[p]["correct_by_turn"] if s) / n
        if done:
            bar.set_postfix(pass1=f"{correct / done:.3f}", refresh=False)
        bar.update(done - bar.n)
    bar.close()
    return problems


def markdown_table(metrics: dict, other: dict = None, names=("this run", "other"), value: str = "value") -> str:
    """Metrics as a markdown table; with `other`, side by side with the difference. `value` heads the single
    column (eval.py names the dtype there: `value (bf16)`)."""
    if other is None:
        rows = [f"| metric | {value} |", "|---|---|"] + [f"| {k} | {v:.4f} |" for k, v in metrics.items()]
    else:
        rows = [f"| metric | {names[0]} | {names[1]} | difference |", "|---|---|---|---|"]
        for k in list(dict.fromkeys([*metrics, *other])):
            a, b = metrics.get(k), other.get(k)
            diff = f"{a - b:+.4f}" if a is not None and b is not None else ""
            fmt = lambda v: "" if v is None else f"{v:.4f}"  # noqa: E731
            rows.append(f"| {k} | {fmt(a)} | {fmt(b)} | {diff} |")
    return "\n".join(rows)


# What decides an evaluation's numbers besides the model: two results that differ in one of these are not comparable.
EVAL_SETTINGS = ("env", "data_path", "limit", "n", "k", "max_turns", "episode_end", "temperature", "top_p", "top_k",
                 "max_answer_seq_len", "max_prompt_seq_len", "seed", "dtype")


def setting_differences(config: dict, other: dict) -> list:
    """`name a vs b` for every evaluation setting in which two results.json configs differ (settings a result
    predates are skipped)."""
    return [f"{k} {config[k]!r} vs {other[k]!r}" for k in EVAL_SETTINGS
            if k in config and k in other and config[k] != other[k]]


def model_label(path: str) -> str:
    """A short column name for a model: its last two path parts (`grpo_arith_smollm2/final`, `Qwen/Qwen3-4B`)."""
    return "/".join(os.path.normpath(path).split(os.sep)[-2:])
