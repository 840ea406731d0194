"""The one wrapper every reward and verifier call goes through: timeout, error counting, score 0 on failure."""
import concurrent.futures
import logging
import math
import threading
from dataclasses import dataclass

logger = logging.getLogger(__name__)


@dataclass
class RewardStats:
    calls: int = 0
    errors: int = 0
    timeouts: int = 0

    @property
    def failures(self) -> int:
        return self.errors + self.timeouts


class RewardCaller:
    """Calls `fn(prompt, completion, sample)` off the main thread with a timeout.

    An exception, a timeout or a non-finite result is counted and scored 0 (never a crash, never a NaN).
    A timed-out call cannot be killed from Python; its thread is abandoned and the pool replaced, so a verifier
    that can hang for real (math-verify on adversarial LaTeX) should run its work in a killable process, as
    rewards.math.MathVerifier does.
    """

    def __init__(self, fn, name: str, timeout_s: float = 10.0, workers: int = 1):
        """workers > 1 lets that many calls run at once (callers on several threads, e.g. --code_workers)."""
        self.fn, self.name, self.timeout_s, self.workers = fn, name, timeout_s, workers
        self.stats = RewardStats()
        self._lock = threading.Lock()
        self._pool = self._new_pool()

    def _new_pool(self):
        return concurrent.futures.ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix=f"reward-{self.name}")

    def _count(self, field: str):
        with self._lock:
            setattr(self.stats, field, getattr(self.stats, field) + 1)

    def __call__(self, prompt, completion, sample):
        ok, value = self.run(self.fn, prompt, completion, sample)
        return self._check(value) if ok else 0.0

    def run(self, fn, *args):
        """Call fn(*args) under this caller's timeout and counters. Returns (True, value) or (False, None)."""
        self._count("calls")
        future = self._pool.submit(fn, *args)
        try:
            return True, future.result(timeout=self.timeout_s)
        except concurrent.futures.TimeoutError:
            self._count("timeouts")
            logger.warning("reward %s timed out after %.1fs; scored 0", self.name, self.timeout_s)
            with self._lock:  # the hung thread keeps its slot in the old pool; new calls get a fresh one
                self._pool.shutdown(wait=False)
                self._pool = self._new_pool()
        except Exception as exc:  # a reward bug must not kill a multi-hour run: count it and score 0
            self._count("errors")
            logger.warning("reward %s raised %s: %s; scored 0", self.name, type(exc).__name__, exc)
        return False, None

    def _check(self, value):
        if isinstance(value, dict):
            return {k: self.check_scalar(v, f"{self.name}/{k}") for k, v in value.items()}
        return self.check_scalar(value, self.name)

    def check_scalar(self, value, label):
        if value is None:  # abstention: kept as NaN and left out of that reward's statistics downstream
            return float("nan")
        try:
            value = float(value)
        except (TypeError, ValueError):
            self._count("errors")
            logger.warning("reward %s returned %r, not a number; scored 0", label, value)
            return 0.0
        if not math.isfinite(value):
            self._count("errors")
            logger.warning("reward %s returned %r; scored 0", label, value)
            return 0.0
        return value
