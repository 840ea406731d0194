"""The --reward_funcs of a step, scored concurrently in killable worker processes (rewards/worker_pool.py).

Every call of every function goes into one pool of --reward_workers processes with a --reward_timeout deadline
per call. credo's convention: one call per completion. TRL's: one batched call per chunk, the rank's completions
split into up to --reward_workers chunks of whole prompt groups, run in parallel (credo's reading: TRL calls a
function once on the whole batch, in-process and without a deadline; chunks keep one deadline per call meaningful
and let a hang cost one timeout, and whole groups keep group-relative rewards right). Accounting is per
completion in both: a failed TRL chunk counts as that many failed calls, so one --max_reward_error_rate means the
same for both conventions. A call that failed outside the response is retried once (--reward_retries;
rewards/worker_pool.py), and each completion is counted by how its call ended (rewards.base.RewardStats).
"""
from rewards.base import RewardAccount
from rewards.conventions import TRL, chunks, trl_kwargs
from rewards.worker_pool import WorkerPool


class PooledRewards:
    def __init__(self, specs: list, workers: int, timeout_s: float, max_steps: int = 0, group_size: int = 1,
                 retries: int = 1):
        """group_size: completions per prompt; TRL chunks hold whole groups, so a function sees each group whole.
        retries: --reward_retries, for a call that failed outside the response."""
        self.specs, self.workers, self.max_steps, self.group_size = list(specs), workers, max_steps, group_size
        self.accounts = [RewardAccount(spec.name) for spec in self.specs]
        self.pool = WorkerPool([spec.target for spec in self.specs], workers, timeout_s, retries) \
            if self.specs else None

    @property
    def needs_completion_ids(self) -> bool:
        return any(spec.style == TRL for spec in self.specs)

    def score(self, prompts, completions, samples, completion_ids=None, step: int = 0) -> list:
        """[per function: [per completion: float (NaN = abstained) | dict of them]]; failures scored 0."""
        n = len(completions)
        calls, owners = [], []  # owners[k] = (function index, first completion, last completion + 1)
        for f, spec in enumerate(self.specs):
            if spec.style == TRL:
                g = self.group_size if n % self.group_size == 0 else 1
                for start, stop in ((a * g, b * g) for a, b in chunks(n // g, self.workers)):
                    ids = completion_ids[start:stop] if completion_ids is not None else [[] for _ in range(start, stop)]
                    kwargs = trl_kwargs(prompts[start:stop], completions[start:stop], ids, samples[start:stop],
                                        step, self.max_steps)
                    calls.append((f, (), kwargs))
                    owners.append((f, start, stop))
            else:
                for i in range(n):
                    calls.append((f, (prompts[i], completions[i], samples[i]), {}))
                    owners.append((f, i, i + 1))
        scores = [[0.0] * n for _ in self.specs]
        outcomes = self.pool.map(calls) if calls else []
        for (f, start, stop), outcome in zip(owners, outcomes):
            account, size = self.accounts[f], stop - start
            values = outcome.value if self.specs[f].style == TRL else [outcome.value]
            if outcome.status == "ok" and (not isinstance(values, list) or len(values) != size):
                got = f"{len(values)} values" if isinstance(values, list) else f"{values!r:.80}"
                outcome.status, outcome.value = "error", f"returned {got} for {size} completions; expected a list of {size}"
            account.settle(outcome.status, outcome.value, outcome.retried, n=size)
            if outcome.status != "ok":
                continue
            for i, value in zip(range(start, stop), values):
                scores[f][i] = account.check(value)
        return scores

    def close(self):
        if self.pool is not None:
            self.pool.close()
