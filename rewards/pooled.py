"""The --reward_funcs of a step, scored concurrently in killable worker processes (rewards/worker_pool.py).

Every call of every function goes into one pool of --reward_workers processes with a --reward_timeout deadline
per call. credo's convention: one call per completion. TRL's: one batched call per chunk, the rank's completions
split into up to --reward_workers chunks of whole prompt groups, run in parallel (credo's reading: TRL calls a
function once on the whole batch, in-process and without a deadline; chunks keep one deadline per call meaningful
and let a hang cost one timeout, and whole groups keep group-relative rewards right). Accounting is per
completion in both: a failed TRL chunk counts as that many failed calls, so one --max_reward_error_rate means the
same for both conventions. A call that failed outside the response is retried once (--reward_retries;
rewards/worker_pool.py), and each completion is counted by how its call ended (rewards.base.RewardStats).

A call that raised an ordinary exception, of a function that has scored some response (this step or before), gets a
control call, the same function and row with the empty response (for a TRL chunk, every completion of the chunk
empty; one control per function and row): when the control succeeds the response broke the function, and it scores
the function's floor and counts as `malformed`, not as a failure (rewards/base.py). A TRL chunk fails as one call,
so each completion in a chunk that a response broke scores the floor.
"""
from rewards.base import CONTROL_COMPLETION, CONTROLLED_STATUS, MALFORMED, RewardAccount, floor_score
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
            self._check_size(outcome, f, stop - start)
        floors = self._controls(owners, outcomes, prompts, samples, step)
        for k, ((f, start, stop), outcome) in enumerate(zip(owners, outcomes)):
            account = self.accounts[f]
            account.settle(outcome.status, outcome.value, outcome.retried, n=stop - start)
            if outcome.status == MALFORMED:
                for i, floor in zip(range(start, stop), floors[k]):
                    scores[f][i] = account.check(floor)
            elif outcome.status == "ok":
                values = outcome.value if self.specs[f].style == TRL else [outcome.value]
                for i, value in zip(range(start, stop), values):
                    scores[f][i] = account.check(value)
        return scores

    def _check_size(self, outcome, f: int, size: int):
        """A TRL call that returned no list of `size` values failed (an error of the function's)."""
        values = outcome.value if self.specs[f].style == TRL else [outcome.value]
        if outcome.status == "ok" and (not isinstance(values, list) or len(values) != size):
            got = f"{len(values)} values" if isinstance(values, list) else f"{values!r:.80}"
            outcome.status, outcome.value = "error", f"returned {got} for {size} completions; expected a list of {size}"

    def _controls(self, owners, outcomes, prompts, samples, step) -> dict:
        """Run the control of every call that raised, of a function that has scored a response (module docstring);
        mark those whose control succeeded MALFORMED. Returns {call index: the floor score of each completion}."""
        working = {f for (f, _, _), o in zip(owners, outcomes) if o.status == "ok"}
        working |= {f for f, account in enumerate(self.accounts) if account.scored > 0}
        failed = [k for k, o in enumerate(outcomes) if o.status == CONTROLLED_STATUS and owners[k][0] in working]
        keys, which, controls = {}, {}, []  # one control per function and row (a TRL chunk: its rows)
        for k in failed:
            f, start, stop = owners[k]
            key = (f,) + tuple((prompts[i], id(samples[i])) for i in range(start, stop))
            if key not in keys:
                keys[key] = len(controls)
                if self.specs[f].style == TRL:
                    kwargs = trl_kwargs(prompts[start:stop], [CONTROL_COMPLETION] * (stop - start),
                                        [[] for _ in range(start, stop)], samples[start:stop], step, self.max_steps)
                    controls.append((f, (), kwargs))
                else:
                    controls.append((f, (prompts[start], CONTROL_COMPLETION, samples[start]), {}))
            which[k] = keys[key]
        results = self.pool.map(controls, retry=False) if controls else []
        floors = {}
        for k in failed:
            f, start, stop = owners[k]
            control = results[which[k]]
            self._check_size(control, f, stop - start)
            if control.status == "ok":
                values = control.value if self.specs[f].style == TRL else [control.value]
                outcomes[k].status, floors[k] = MALFORMED, [floor_score(v) for v in values]
        return floors

    def close(self):
        if self.pool is not None:
            self.pool.close()
