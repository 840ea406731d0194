"""Scoring a rollout: the env's verifier (success) and every --reward_funcs component, through RewardCaller.

Also the step's reward metrics and the guard that stops a run whose rewards mostly fail.
"""
import numpy as np
import torch

from envs import StepResult, env_class
from rewards.base import RewardCaller
from rewards.registry import CORRECTNESS, build_reward_fn
from rl import dist
from rl.advantages.stats import group_mean_std
from rl.episode_end import env_kwargs
from rl.errors import RewardFailure, TrainingAborted

SUCCESS_THRESHOLD = 1.0 - 1e-6  # a response "succeeds" when its verifier score is full marks


class Scorer:
    def __init__(self, args):
        self.args = args
        self.env_cls = env_class(args.env)
        self.shared_verifier = self.env_cls.make_verifier(answer_key=args.answer_key)  # one for all episodes
        # counts and guards every env.step; --code_workers steps may run at once (sandboxed programs, slow verifiers)
        self.verifier = RewardCaller(None, name=CORRECTNESS, workers=args.code_workers)
        # a user function `pkg.module:fn` reports as `fn` (reward/fn/mean, ...)
        self.extra = [RewardCaller(build_reward_fn(name, args), name=name.rpartition(":")[2])
                      for name in args.reward_funcs if name != CORRECTNESS]
        self.callers = [self.verifier, *self.extra]
        self.component_names = []  # reward components seen on any rank, in first-seen order
        self.checked = {"calls": 0.0, "failures": 0.0}  # global totals at the last failure check

    def new_env(self):
        return self.env_cls(verifier=self.shared_verifier, prompt_key=self.args.prompt_key,
                            answer_key=self.args.answer_key, max_turns=self.args.max_turns,
                            **env_kwargs(self.args, self.env_cls))

    def safe_step(self, env, text: str) -> StepResult:
        """env.step under the verifier's timeout and counters; a failure ends the episode with score 0."""
        ok, result = self.verifier.run(env.step, text)
        if not ok:
            return StepResult(observation=[], score=0.0, done=True, info={"failed": True})
        result.score = self.verifier.check_scalar(result.score, CORRECTNESS)
        return result

    def score_alternative(self, env, text: str):
        """The score `text` would get at env's current turn, or None (the env cannot say, or the call failed)."""
        ok, value = self.verifier.run(env.score_turn, text)
        return self.verifier.check_scalar(value, CORRECTNESS) if ok else None

    def trajectory_score(self, turn_scores: torch.Tensor) -> torch.Tensor:
        """Tensor[N, T] -> Tensor[N]: the final turn's score, or the best turn's (--traj_score best)."""
        if self.args.traj_score == "best":
            return torch.nan_to_num(turn_scores, nan=float("-inf")).max(1).values
        present = ~torch.isnan(turn_scores)
        last = present.long().cumsum(1).argmax(1)
        return turn_scores.gather(1, last.unsqueeze(1)).squeeze(1)

    def score(self, batch):
        """Fill batch.correctness, batch.components ({name: Tensor[N]}, NaN = abstained) and batch.scores.

        The env's verifier already scored every turn during the episodes; the other rewards score the final
        response. A dict-valued reward's keys are learned as they appear and unioned across ranks, so the
        component columns are named and ordered the same on every rank. A failed call was scored 0.
        """
        rows = []
        trajectory = self.trajectory_score(batch.turn_scores).tolist()
        for completion, sample, prompt, correctness in zip(batch.completions, batch.samples, batch.prompts, trajectory):
            comps = {CORRECTNESS: correctness} if CORRECTNESS in self.args.reward_funcs else {}
            for caller in self.extra:
                value = caller(prompt, completion, sample)
                comps.update(value if isinstance(value, dict) else {caller.name: value})
            rows.append((correctness, comps))
        local_names = list(dict.fromkeys(n for _, comps in rows for n in comps))
        for names in dist.all_gather_object(local_names):
            self.component_names += [n for n in names if n not in self.component_names]
        batch.components = {n: torch.tensor([c.get(n, 0.0) for _, c in rows], dtype=torch.float32)
                            for n in self.component_names}
        batch.correctness = torch.tensor([c for c, _ in rows], dtype=torch.float32)
        batch.scores = self.scalar_reward(batch.components)
        return batch

    def scalar_reward(self, components: dict) -> torch.Tensor:
        """The weighted sum of components (abstentions count 0): GRPO's reward when there are several."""
        weights = self.args.reward_weights or [1.0] * len(components)
        if len(weights) != len(components):
            raise TrainingAborted(f"--reward_weights has {len(weights)} entries but the rewards produce "
                             f"{len(components)} components: {', '.join(components)}")
        stacked = torch.stack([torch.nan_to_num(v, nan=0.0) for v in components.values()], dim=1)
        return stacked @ torch.tensor(weights, dtype=torch.float32)

    def check_failures(self, step: int):
        """Raise RewardFailure when more than --max_reward_error_rate of this step's calls (all ranks) failed."""
        totals = dist.all_reduce(torch.tensor([float(sum(c.stats.calls for c in self.callers)),
                                               float(sum(c.stats.failures for c in self.callers))], dtype=torch.float64))
        calls = totals[0].item() - self.checked["calls"]
        failures = totals[1].item() - self.checked["failures"]
        self.checked = {"calls": totals[0].item(), "failures": totals[1].item()}
        if calls and failures / calls > self.args.max_reward_error_rate:
            raise RewardFailure(
                f"{int(failures)} of {int(calls)} reward calls failed at step {step} (more than "
                f"--max_reward_error_rate {self.args.max_reward_error_rate}); see the warnings above for the errors. "
                f"Nothing was trained on this batch.")

    def metrics(self, inputs) -> dict:
        """Reward metrics of one step from batch-global AdvantageInputs."""
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
        failures = dist.all_reduce(torch.tensor([float(c.stats.failures) for c in self.callers], dtype=torch.float64))
        for caller, total in zip(self.callers, failures.tolist()):
            m[f"reward/{caller.name}/errors"] = total
        for name, values in inputs.components.items():
            present = values[~torch.isnan(values)]
            m[f"reward/{name}/mean"] = present.mean().item() if len(present) else float("nan")
            m[f"reward/{name}/std"] = present.std().item() if len(present) > 1 else 0.0
            m[f"reward/{name}/frac_zero_std"] = frac_constant_groups(values)
        return m

    def state_dict(self) -> dict:
        return {"component_names": list(self.component_names), "checked": dict(self.checked),
                "stats": {c.name: vars(c.stats).copy() for c in self.callers}}

    def load_state_dict(self, state: dict):
        self.component_names = list(state["component_names"])
        self.checked = dict(state["checked"])
        for caller in self.callers:
            vars(caller.stats).update(state["stats"].get(caller.name, {}))


def turn_metrics(turn_scores: torch.Tensor) -> dict:
    """Multi-turn success: cumulative success by turn and the mean number of turns the successes took."""
    solved = torch.nan_to_num(turn_scores, nan=0.0) >= SUCCESS_THRESHOLD      # [N, T]
    ever = solved.any(1)
    first = torch.where(ever, solved.float().argmax(1), torch.full_like(ever, -1, dtype=torch.long))
    m = {f"success_by_turn/{k + 1}": (ever & (first <= k)).float().mean().item() for k in range(turn_scores.shape[1])}
    m["avg_turns_to_success"] = (first[ever] + 1).float().mean().item() if ever.any() else float("nan")
    m["avg_turns"] = (~torch.isnan(turn_scores)).sum(1).float().mean().item()
    return m
