"""Math-answer verifier on math-verify, run in killable worker processes.

math-verify's own timeouts use SIGALRM, which only works on a main thread and cannot stop a sympy call that
hangs in C. So the parse/verify work (rewards/math_worker.py) runs on the main thread of a reward worker process
(rewards/worker_pool.py), where those signals work, and the parent enforces a hard per-call deadline: a call
that overruns it kills its worker and is retried once on a fresh one (as a worker that died is: a failure outside
the response, rewards/base.py); one that fails again is counted and scored 0. rl/scoring.py reports and guards this
account beside the env's own (reward/math-verify/...).
"""
from rewards.base import RewardAccount
from rewards.worker_pool import WorkerPool

CHECK = ("import", "rewards.math_worker:check")


class MathVerifier:
    """Scores 1.0 when the completion's final answer is mathematically equal to sample[answer_key]."""
    name = "correctness"

    def __init__(self, answer_key: str = "answer", timeout_s: float = 10.0, workers: int = 2):
        """workers: verifications that may run at once (env steps run on --code_workers threads)."""
        self.answer_key = answer_key
        self.account = RewardAccount("math-verify")
        self.pool = WorkerPool([CHECK], workers, timeout_s)

    @property
    def stats(self):
        return self.account.stats

    @property
    def timeout_s(self) -> float:
        return self.pool.timeout_s

    @timeout_s.setter
    def timeout_s(self, value: float):
        self.pool.timeout_s = value

    def __call__(self, prompt, completion, sample) -> float:
        return self.verify(str(sample[self.answer_key]), completion)

    def verify(self, gold: str, completion: str) -> float:
        """1.0 if `completion` (free text; its last \\boxed{} or expression) equals the gold answer (LaTeX)."""
        outcome = self.pool.map([(0, (gold, completion), {})])[0]  # a worker death is retried once (worker_pool.py)
        self.account.settle(outcome.status, outcome.value, outcome.retried)
        return 1.0 if outcome.status == "ok" and outcome.value else 0.0

    def close(self):
        self.pool.close()
