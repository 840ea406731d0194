"""Scoring a rollout: the env's verifier (success, in-process through RewardCaller) and every --reward_funcs
component (in killable worker processes through PooledRewards).

Also the step's reward metrics (each failure kind counted: rewards/base.py) and the guards that stop a run when
one reward function's calls mostly fail, or all fail outside the response (the verifier is down).
"""
import os
import time
from dataclasses import dataclass

import numpy as np
import torch

from envs import StepResult, env_class
from envs.base import SUCCESS_THRESHOLD
from rewards.base import CONTROL_COMPLETION, RewardAccount, RewardCaller
from rewards.pooled import PooledRewards
from rewards.policy_rewards import POLICY_REWARDS, PolicyRewards, PolicyRewardSettings, normalise
from rewards.registry import CORRECTNESS, BuiltInRewardSettings, add_builtin_reward_flags, build_reward_fn, reward_spec
from rl.engine import dist
from rl.engine.models import is_local_model_path
from rl.advantages.stats import group_mean_std, last_present
from rl.rollout.episode_end import env_kwargs
from rl.errors import RewardFailure, TrainingAborted
from rl.methods.base import resolve_weights


# A reward's counters checked each step (rewards.base.RewardStats), and their metric names reward/<name>/<metric>
COUNTS = ("calls", "failures", "errors", "timeouts", "infra", "retried", "recovered", "malformed")
METRIC_NAMES = {"errors": "errors_response", "timeouts": "errors_timeout", "infra": "errors_infra",
                "retried": "retried", "recovered": "recovered", "malformed": "malformed"}


@dataclass(frozen=True)
class ScoringSettings:
    """What the scorer reads: the env and its settings, every reward and its mix, timeouts, workers, the failure
    guard (names as on the command line, where they differ in the comment). Validated at parse time."""
    env: str
    prompt_key: str
    answer_key: str
    max_turns: int
    env_settings: dict             # every env's constructor keywords: the episode end and the env's own flags
    reward_names: tuple            # --reward_funcs, or the method's own list (MAESTRO's)
    reward_specs: tuple            # the worker-pool rewards' RewardSpecs (rewards/registry.reward_spec)
    policy: PolicyRewardSettings   # the in-process rewards' flags (ppl, ent, fmt, len, pref)
    reward_weights: tuple          # None: every component weighs 1
    reward_timeout: float
    reward_workers: int
    reward_retries: int            # a call that failed outside the response is run again this many times (0 or 1)
    max_steps: int                 # user rewards see TRL's trainer_state.max_steps
    group_size: int                # --num_generations
    max_reward_error_rate: float
    traj_score: str                # last / best

    @classmethod
    def from_args(cls, args, reward_names=None) -> "ScoringSettings":
        """reward_names: the rewards to compute (default --reward_funcs; a method may name its own: MAESTRO's)."""
        names = tuple(args.reward_funcs if reward_names is None else reward_names)
        env_cls = env_class(args.env)
        built_in = BuiltInRewardSettings.from_args(args)
        # a user function `pkg.module:fn` reports as `fn` (reward/fn/mean, ...)
        specs = tuple(reward_spec(name, built_in) for name in names if name != CORRECTNESS and name not in POLICY_REWARDS)
        return cls(env=args.env, prompt_key=args.prompt_key, answer_key=args.answer_key, max_turns=args.max_turns,
                   env_settings={**env_kwargs(getattr(args, "episode_end", "success"), env_cls),
                                 **env_cls.settings_from_args(args)},
                   reward_names=names, reward_specs=specs, policy=PolicyRewardSettings.from_args(args),
                   reward_weights=tuple(args.reward_weights) if args.reward_weights else None,
                   reward_timeout=args.reward_timeout, reward_workers=args.reward_workers,
                   reward_retries=args.reward_retries, max_steps=args.max_steps,
                   group_size=args.num_generations, max_reward_error_rate=args.max_reward_error_rate,
                   traj_score=args.traj_score)


class Scorer:
    def __init__(self, settings: ScoringSettings):
        self.settings = settings
        self.reward_names = list(settings.reward_names)
        self.env_cls = env_class(settings.env)
        self.shared_verifier = self.env_cls.make_verifier(answer_key=settings.answer_key)  # one for all episodes
        # counts and guards every env.step (run in-process: see rewards/base.py); --code_workers steps run at once
        self.verifier = RewardCaller(None, name=CORRECTNESS, timeout_s=settings.reward_timeout,
                                     retries=settings.reward_retries)
        # the --reward_funcs beside the verifier, in worker processes; None when there are none (the default)
        self.rewards = PooledRewards(list(settings.reward_specs), workers=settings.reward_workers,
                                     timeout_s=settings.reward_timeout, max_steps=settings.max_steps,
                                     group_size=settings.group_size,
                                     retries=settings.reward_retries) if settings.reward_specs else None
        # ppl, ent, fmt, len, pref: computed in-process with the policy (rewards/policy_rewards.py); attach_policy
        self.policy_names = [name for name in self.reward_names if name in POLICY_REWARDS]
        self.policy_rewards = None
        # a verifier with worker processes of its own (math-verify's) keeps an account inside the env step: judged too
        own = getattr(self.shared_verifier, "account", None)
        pooled = self.rewards.accounts if self.rewards else []
        self.callers = [self.verifier, *pooled, *([own] if isinstance(own, RewardAccount) else [])]
        self.component_names = []  # reward components seen on any rank, in first-seen order
        self.checked = self._local_counts()  # this rank's (calls, failures) per reward at the last failure check
        self.step_counts = {}  # per reward, the last checked step's COUNTS (all ranks): {"calls": ..., ...}

    def attach_policy(self, actor, tokenizer):
        """Give the in-process rewards (--reward_funcs ppl, ent, fmt, len, pref) the policy, once it is built."""
        if self.policy_names:
            self.policy_rewards = PolicyRewards(self.policy_names, self.settings.policy, actor, tokenizer)

    def sampling_signals(self) -> frozenset:
        """What the sampling pass records for the in-process rewards (rl/rollout/sampling_signals.py): `ent` and the
        Conductor's hidden state come from the sampling pass where the sampler records them."""
        return self.policy_rewards.sampling_signals if self.policy_rewards else frozenset()

    def new_env(self):
        """One episode's env, with the run's settings as arguments: the episode end (rl/rollout/episode_end.py) and the
        env's own flags (Env.settings_from_args; AppWorld's --appworld_*)."""
        s = self.settings
        return self.env_cls(verifier=self.shared_verifier, prompt_key=s.prompt_key, answer_key=s.answer_key,
                            max_turns=s.max_turns, **s.env_settings)

    def safe_step(self, env, text: str) -> StepResult:
        """env.step under the verifier's timeout and counters (retried after a failure outside the response only
        where the env says its step can run twice: Env.step_retryable); a failure ends the episode with score 0.
        A step that failed where a fresh episode of its row steps on the empty response is the response's doing
        (rewards/base.py: `malformed`, never a failure)."""
        sample = getattr(env, "sample", None)  # the control: a fresh episode of the row, stepped on the empty response

        def control():
            fresh = self.new_env()
            fresh.reset(sample)
            return fresh.step(CONTROL_COMPLETION)
        ok, result = self.verifier.run(env.step, text, retry=getattr(env, "step_retryable", True),
                                       control=control if sample is not None else None)
        if not ok:
            return StepResult(observation=[], score=0.0, done=True, info={"failed": True})
        result.score = self.verifier.check_scalar(result.score, CORRECTNESS)
        return result

    def score_alternative(self, env, text: str, turn: int):
        """The score `text` would have got as turn `turn` of env's episode, or None (the env cannot say, or the call
        failed)."""
        ok, value = self.verifier.run(env.score_turn_at, turn, text,
                                      control=lambda: env.score_turn_at(turn, CONTROL_COMPLETION))
        return self.verifier.check_scalar(value, CORRECTNESS) if ok else None

    def trajectory_score(self, turn_scores: torch.Tensor) -> torch.Tensor:
        """Tensor[N, T] -> Tensor[N]: the final turn's score, or the best turn's (--traj_score best)."""
        if self.settings.traj_score == "best":
            return torch.nan_to_num(turn_scores, nan=float("-inf")).max(1).values
        return last_present(turn_scores)

    def score(self, batch, step: int = 0, scalarize=None, timings=None):
        """Fill batch.correctness, batch.components ({name: Tensor[N]}, NaN = abstained) and batch.scores.

        Every reward is computed here, once. batch.scores is the --reward_weights sum of the components, or what
        `scalarize(batch, components) -> Tensor[N]` returns when given and not None (a method's own mix: MAESTRO's).

        The env's verifier already scored every turn during the episodes; the other rewards score the final
        response. A dict-valued reward's keys are learned as they appear and unioned across ranks, so the
        component columns are named and ordered the same on every rank. A failed call was scored 0.
        `step` (the step being scored) is TRL's trainer_state.global_step.
        """
        trajectory = self.trajectory_score(batch.turn_scores).tolist()
        accounts, extra = [], []
        if self.rewards:
            ids = self.completion_ids(batch) if self.rewards.needs_completion_ids else None
            accounts, extra = self.rewards.accounts, self.rewards.score(batch.prompts, batch.completions,
                                                                        batch.samples, ids, step)
        policy_raw, policy, batch.policy_hidden = {}, {}, None
        if self.policy_rewards:
            t0 = time.perf_counter()
            policy_raw, batch.policy_hidden = self.policy_rewards.raw(batch)
            if timings is not None:  # time/policy_rewards: MAESTRO's reward overhead
                timings["policy_rewards"] = time.perf_counter() - t0
            # each prompt group lives on one rank, so the within-group normalisation needs no collective
            policy = normalise(policy_raw, batch.group_ids.cpu())
        rows = []
        for i, correctness in enumerate(trajectory):
            comps = {CORRECTNESS: correctness} if CORRECTNESS in self.reward_names else {}
            for account, values in zip(accounts, extra):
                value = values[i]
                comps.update(value if isinstance(value, dict) else {account.name: value})
            comps.update({name: float(values[i]) for name, values in policy.items()})
            rows.append((correctness, comps))
        local_names = list(dict.fromkeys(n for _, comps in rows for n in comps))
        for names in dist.all_gather_object(local_names):
            self.component_names += [n for n in names if n not in self.component_names]
        batch.components = {n: torch.tensor([c.get(n, 0.0) for _, c in rows], dtype=torch.float32)
                            for n in self.component_names}
        batch.reward_raw = {**batch.components, **policy_raw}
        batch.correctness = torch.tensor([c for c, _ in rows], dtype=torch.float32)
        mixed = scalarize(batch, batch.components) if scalarize is not None else None
        batch.scores = self.scalar_reward(batch.components) if mixed is None else mixed
        return batch

    def scalar_reward(self, components: dict) -> torch.Tensor:
        """The weighted sum of components (abstentions count 0): GRPO's reward when there are several."""
        weights = list(self.settings.reward_weights or [1.0] * len(components))
        if len(weights) != len(components):
            raise TrainingAborted(f"--reward_weights has {len(weights)} entries but the rewards produce "
                             f"{len(components)} components: {', '.join(components)}")
        stacked = torch.stack([torch.nan_to_num(v, nan=0.0) for v in components.values()], dim=1)
        return stacked @ torch.tensor(weights, dtype=torch.float32)

    @staticmethod
    def completion_ids(batch) -> list:
        """The response's token ids per row (TRL's completion_ids; --reward_funcs are single-turn)."""
        responses = batch.input_ids[:, batch.prompt_len:].cpu()
        return [row[mask.bool()].tolist() for row, mask in zip(responses, batch.response_mask.cpu())]

    def _local_counts(self) -> dict:
        return {c.name: [getattr(c.stats, field) for field in COUNTS] for c in self.callers}

    def check_failures(self, step: int):
        """Raise RewardFailure when one reward function's own calls in this step (all ranks) all failed outside the
        response, on their retries too (its verifier or what it runs on is down: nobody is scored, whatever
        --max_reward_error_rate says), or when more than --max_reward_error_rate of them failed. It names the
        function and its last error. Each function is judged alone, so a verifier's successes cannot hide a broken
        reward, and vice versa."""
        now = self._local_counts()
        local = [[a - b for a, b in zip(now[c.name], self.checked[c.name])] for c in self.callers]
        self.checked = now
        totals = dist.all_reduce(torch.tensor(local, dtype=torch.float64)).tolist()
        self.step_counts = {c.name: dict(zip(COUNTS, row)) for c, row in zip(self.callers, totals)}
        rate = self.settings.max_reward_error_rate
        down = [name for name, n in self.step_counts.items() if n["calls"] and n["timeouts"] + n["infra"] == n["calls"]]
        failing = [name for name, n in self.step_counts.items()
                   if name not in down and n["calls"] and n["failures"] / n["calls"] > rate]
        if not down and not failing:
            return
        last_errors = {}
        for errors in dist.all_gather_object({c.name: c.stats.last_error for c in self.callers}):
            last_errors.update({k: v for k, v in errors.items() if v and k not in last_errors})
        again = "after --reward_retries 1, " if self.settings.reward_retries else ""
        lines = [f"reward {name!r}: {int(n['failures'])} of {int(n['calls'])} reward calls failed at step {step}, every "
                 f"one outside the response ({again}last error: {last_errors.get(name) or 'none recorded'}): it or what "
                 f"it runs on is down, so no response was scored, whatever --max_reward_error_rate says"
                 for name, n in self.step_counts.items() if name in down]
        lines += [f"reward {name!r}: {int(n['failures'])} of {int(n['calls'])} reward calls failed at step {step} (more "
                  f"than --max_reward_error_rate {rate}); last error: {last_errors.get(name) or 'none recorded'}"
                  for name, n in self.step_counts.items() if name in failing]
        raise RewardFailure("; ".join(lines) + ". Nothing was trained on this batch: the run keeps the state from "
                            "before this step (a checkpoint, after the first step) and the same command retries it.")

    def metrics(self, inputs) -> dict:
        """Reward metrics of one step from the batch-global view (Rollout.gather())."""
        scores, gids = inputs.scores, inputs.group_ids
        first_of_group = torch.as_tensor(np.unique(gids.cpu().numpy(), return_index=True)[1])

        def frac_constant_groups(values):
            _, std, count = group_mean_std(values.double(), gids)
            return ((std == 0) | (count < 2))[first_of_group].float().mean().item()

        m = {"reward/mean": scores.mean().item(), "reward/std": scores.std().item() if len(scores) > 1 else 0.0,
             "success_rate": (inputs.correctness >= SUCCESS_THRESHOLD).float().mean().item(),
             "frac_zero_std_groups": frac_constant_groups(scores)}
        if inputs.turn_scores.shape[1] > 1:
            m.update(turn_metrics(inputs.turn_scores))
        for name, n in self.step_counts.items():  # this step's, all ranks (not a running total)
            m[f"reward/{name}/errors"] = n["failures"]  # calls scored 0 by a failure, of any kind
            for field in COUNTS[2:]:  # errors_response, errors_timeout, errors_infra, retried, recovered
                m[f"reward/{name}/{METRIC_NAMES[field]}"] = n[field]
        for name, values in inputs.components.items():
            present = values[~torch.isnan(values)]
            m[f"reward/{name}/mean"] = present.mean().item() if len(present) else float("nan")
            m[f"reward/{name}/std"] = present.std().item() if len(present) > 1 else 0.0
            m[f"reward/{name}/frac_zero_std"] = frac_constant_groups(values)
        return m

    def state_dict(self) -> dict:
        return {"component_names": list(self.component_names),
                "stats": {c.name: vars(c.stats).copy() for c in self.callers}}

    def load_state_dict(self, state: dict):
        self.component_names = list(state["component_names"])
        for caller in self.callers:
            vars(caller.stats).update(state["stats"].get(caller.name, {}))
        self.checked = self._local_counts()

    def close(self):
        """Stop the reward worker processes (they are also killed at exit, and die with the trainer)."""
        if self.rewards:
            self.rewards.close()


def turn_metrics(turn_scores: torch.Tensor) -> dict:
    """Multi-turn success: cumulative success by turn and the mean number of turns the successes took."""
    solved = torch.nan_to_num(turn_scores, nan=0.0) >= SUCCESS_THRESHOLD      # [N, T]
    ever = solved.any(1)
    first = torch.where(ever, solved.float().argmax(1), torch.full_like(ever, -1, dtype=torch.long))
    m = {f"success_by_turn/{k + 1}": (ever & (first <= k)).float().mean().item() for k in range(turn_scores.shape[1])}
    m["avg_turns_to_success"] = (first[ever] + 1).float().mean().item() if ever.any() else float("nan")
    m["avg_turns"] = (~torch.isnan(turn_scores)).sum(1).float().mean().item()
    return m


def validate_open_domain_rewards(args, bad):
    """--reward_funcs naming fmt / ppl / ent / len / pref (any method) and --len_min / --len_max."""
    if not 0 <= args.len_min < args.len_max:
        bad(f"--len_min {args.len_min} / --len_max {args.len_max}: need 0 <= len_min < len_max")
    if "pref" in args.reward_funcs and not args.reward_model_name_or_path:
        bad("--reward_funcs pref scores with a reward model: pass --reward_model_name_or_path")
    check_reward_model_path(args, bad)


def check_reward_model_path(args, bad):
    path = args.reward_model_name_or_path
    if path and is_local_model_path(path):
        path = args.reward_model_name_or_path = os.path.expanduser(path)
        if not os.path.exists(path):
            bad(f"--reward_model_name_or_path {path} does not exist")


def add_reward_flags(p):
    """The rewards' flags: what scores a response and how its calls are run."""
    g = p.add_argument_group("rewards")
    g.add_argument("--reward_funcs", default="correctness",
                   help="comma list of rewards: correctness (the env's verifier), format, length, the open-domain "
                        "rewards fmt, ppl (NOVER), ent (MAESTRO's, higher entropy better), em_ent (EM-GRPO's, lower better), len, pref (rewards/policy_rewards.py), or "
                        "package.module:function: credo's fn(prompt, completion, sample) returning a float, a dict of "
                        "components, or None to abstain, or TRL's f(prompts, completions, **kwargs) returning a list")
    g.add_argument("--reward_weights", default=None,
                   help="comma list, one weight per reward component (default 1 each); GRPO sums weighted components")
    add_builtin_reward_flags(g)  # --format_style, --length_limit (rewards/registry.py)
    g.add_argument("--code_workers", type=int, default=2,
                   help="env steps (verifier calls, sandboxed programs) run in parallel per rank")
    g.add_argument("--reward_timeout", type=float, default=10.0,
                   help="seconds per reward call (a --reward_funcs call, an env step); a call past it scores 0 and "
                        "counts as failed, and a --reward_funcs call's worker process is killed")
    g.add_argument("--reward_workers", type=int, default=8,
                   help="worker processes per rank running --reward_funcs calls at once, so a step whose calls all "
                        "hang costs about one --reward_timeout")
    g.add_argument("--max_reward_error_rate", type=float, default=0.5,
                   help="stop (with a checkpoint of the state before the step) when more than this fraction of "
                        "one reward function's own calls in a step fail. Whatever it is, a step whose calls of one "
                        "function ALL fail outside the response (a dead worker, OSError, a timeout; on their retries "
                        "too) stops the run: the verifier is down")
    g.add_argument("--reward_retries", type=int, default=1, choices=(0, 1),
                   help="a reward call that fails outside the response (its worker process died, it raised OSError, "
                        "MemoryError or rewards.base.InfrastructureError, it timed out) runs once more and the "
                        "retry's score is used; failing again, it is the response's and scores 0. 0: score it 0 at "
                        "once. Default 1")


def validate_rewards(args, method, bad):
    """--reward_funcs becomes a list and each name is checked (built once); then its weights, the open-domain
    rewards' flags, the method's reward count (its rl/methods/ class `method`), and how the calls run."""
    args.reward_funcs = [name.strip() for name in args.reward_funcs.split(",") if name.strip()]
    if not args.reward_funcs:
        bad("--reward_funcs is empty")
    built_in = BuiltInRewardSettings.from_args(args)
    for name in args.reward_funcs:
        if name != CORRECTNESS and name not in POLICY_REWARDS:
            try:
                build_reward_fn(name, built_in)
            except KeyError as exc:
                bad(exc.args[0])
    if len(set(args.reward_funcs)) != len(args.reward_funcs):
        bad(f"--reward_funcs lists a reward twice: {','.join(args.reward_funcs)}")
    short = [name.rpartition(":")[2] for name in args.reward_funcs]  # the metric names: reward/<name>/...
    if len(set(short)) != len(short):
        bad(f"--reward_funcs: two rewards would report under one name ({','.join(short)}); rename a function")
    if len(args.reward_funcs) < method.min_rewards:
        bad(f"--algo {args.algo} normalises each reward separately and needs at least "
            f"{ {2: 'two', 3: 'three'}.get(method.min_rewards, method.min_rewards)} rewards; "
            f"got --reward_funcs {','.join(args.reward_funcs)} (e.g. --reward_funcs correctness,length)")
    resolve_weights(args, "reward_weights", bad)
    validate_open_domain_rewards(args, bad)
    if args.code_workers < 1:
        bad(f"--code_workers must be >= 1, got {args.code_workers}")
    if not args.reward_timeout > 0 or args.reward_workers < 1:
        bad(f"--reward_timeout must be > 0 and --reward_workers >= 1, got {args.reward_timeout}, {args.reward_workers}")
    if not 0 <= args.max_reward_error_rate <= 1:
        bad(f"--max_reward_error_rate must be in [0, 1], got {args.max_reward_error_rate}")
