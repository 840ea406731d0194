"""eval.py --reward_funcs: each reward function's mean over the eval set, named as training logs it
(`reward/<name>/mean`, one per component of a dict-valued function), so that a run trained on
`correctness,my_pkg.rewards:judge` is evaluated on both.

The same registry and worker pool as training (rewards/registry.py, rewards/pooled.py): each call runs in a killable
worker with --reward_timeout; a failed call scores 0 and is counted (`reward/<name>/errors`). As in training the
functions score each sample's final response and `correctness` is the env verifier's score of its last turn. The
built-in rewards' own settings (--format_style, --length_limit, --len_min / --len_max, --tool_correct_mode,
--think_length_limit) are the training run's, read from its config.json when the model is a run's export, else
train.py's defaults.
"""
import argparse
import json
import math
import os
from dataclasses import dataclass

from rewards.policy_rewards import POLICY_REWARDS
from rewards.registry import CORRECTNESS, BuiltInRewardSettings, build_reward_fn, reward_spec


def add_eval_reward_flags(p):
    p.add_argument("--reward_funcs", default=None,
                   help="comma list of train.py's reward functions (correctness, format, length, ..., or "
                        "package.module:function) whose mean over the eval set is reported as reward/<name>/mean, as "
                        "training logs it; default none")
    p.add_argument("--reward_timeout", type=float, default=10.0, help="seconds per --reward_funcs call (train.py's)")
    p.add_argument("--reward_workers", type=int, default=4, help="worker processes running --reward_funcs calls")


def run_config_of(model_path: str):
    """(the training run's config.json as a dict, its path) for a run's export (OUTPUT_DIR/final, best, hf/step_N,
    or compare.py's RUN/train/final), else (None, None)."""
    model_path = os.path.abspath(model_path.rstrip(os.sep))
    for run_dir in (os.path.dirname(model_path), os.path.dirname(os.path.dirname(model_path))):
        path = os.path.join(run_dir, "config.json")
        try:
            with open(path) as f:
                config = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(config, dict) and isinstance(config.get("flags"), dict):
            return config, path
    return None, None


def resolve_reward_settings(args, train_defaults: dict) -> BuiltInRewardSettings:
    """The built-in rewards' settings: train.py's defaults, the training run's values over them (when the model is a
    run's export), then eval.py's own (--length_budget_tokens)."""
    run_flags = (run_config_of(args.model_name_or_path)[0] or {}).get("flags") or {}
    knobs = {**train_defaults, **run_flags}
    if getattr(args, "length_budget_tokens", None) is not None:
        knobs["length_budget_tokens"] = args.length_budget_tokens
    return BuiltInRewardSettings.from_args(argparse.Namespace(**knobs))


def validate_eval_rewards(args, bad, train_defaults) -> None:
    """--reward_funcs as a list (args.reward_names), each built once here as training does, with the settings
    resolve_reward_settings gives (args.reward_settings); the in-process rewards that need the policy (ppl, ent, ...) are refused.
    train_defaults: a callable giving train.py's flag defaults (rl.config.parser_defaults), called only when needed."""
    args.reward_names = [n.strip() for n in (args.reward_funcs or "").split(",") if n.strip()]
    args.reward_settings = None
    if not args.reward_names:
        return
    policy = [n for n in args.reward_names if n in POLICY_REWARDS]
    if policy:
        bad(f"--reward_funcs {','.join(policy)}: computed with the training policy in-process, not by eval.py")
    if not args.reward_timeout > 0 or args.reward_workers < 1:
        bad("--reward_timeout must be > 0 and --reward_workers >= 1")
    settings = args.reward_settings = resolve_reward_settings(args, train_defaults())
    for name in args.reward_names:
        if name != CORRECTNESS:
            try:
                build_reward_fn(name, settings)
            except KeyError as exc:
                bad(exc.args[0])


@dataclass(frozen=True)
class EvalRewardSettings:
    """What EvalRewards reads of eval.py's flags, resolved by validate_eval_rewards."""
    names: tuple                    # --reward_funcs, as a list
    built_in: BuiltInRewardSettings  # the settings each built-in reward is built with (resolve_reward_settings)
    workers: int                    # --reward_workers
    timeout_s: float                # --reward_timeout

    @classmethod
    def from_args(cls, args) -> "EvalRewardSettings":
        return cls(names=tuple(args.reward_names), built_in=args.reward_settings, workers=args.reward_workers,
                   timeout_s=args.reward_timeout)


class EvalRewards:
    """The pooled --reward_funcs of one evaluation: `score(batch)` gives each sample's {component: value}."""

    def __init__(self, settings: EvalRewardSettings, group_size: int):
        from rewards.pooled import PooledRewards
        self.names = list(settings.names)
        specs = [reward_spec(n, settings.built_in) for n in self.names if n != CORRECTNESS]
        self.pooled = PooledRewards(specs, workers=settings.workers, timeout_s=settings.timeout_s,
                                    group_size=group_size)

    def score(self, batch) -> list:
        """[per sample: {component: float}] for one evaluated batch (NaN = abstained; a failed call scored 0)."""
        ids = None
        if self.pooled.needs_completion_ids:
            responses = batch.input_ids[:, batch.prompt_len:].cpu()
            ids = [row[mask.bool()].tolist() for row, mask in zip(responses, batch.response_mask.cpu())]
        values = self.pooled.score(batch.prompts, batch.completions, batch.samples, ids) if self.pooled.specs else []
        rows = [{} for _ in batch.completions]
        for account, per_sample in zip(self.pooled.accounts, values):
            for row, value in zip(rows, per_sample):
                row.update(value if isinstance(value, dict) else {account.name: value})
        return rows

    def metrics(self, problems: list) -> dict:
        """reward/<name>/mean over every sample (abstentions left out), and reward/<name>/errors: failed calls."""
        rows = [dict(r) for p in problems for r in p.get("rewards", [])]
        if CORRECTNESS in self.names:
            finals = [s[-1] if s else 0.0 for p in problems for s in p["score_by_turn"]]
            for row, score in zip(rows, finals):
                row[CORRECTNESS] = score
        out = {}
        for name in dict.fromkeys(k for row in rows for k in row):
            present = [row[name] for row in rows if name in row and not math.isnan(row[name])]
            out[f"reward/{name}/mean"] = sum(present) / len(present) if present else float("nan")
        for account in self.pooled.accounts:
            out[f"reward/{account.name}/errors"] = float(account.stats.failures)
        return out

    def close(self):
        self.pooled.close()
