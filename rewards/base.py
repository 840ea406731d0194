"""Reward accounting (calls, errors, timeouts, the last error) and the in-process call wrapper for env steps.

--reward_funcs run in killable worker processes (rewards/pooled.py); what stays in-process is what cannot move
to another process: an env's step (a stateful per-episode object holding the conversation, and often live
resources: a sandbox, an HTTP client, the math worker) and MAESTRO's ppl / ent / pref (they need the policy's or
a reward model's tensors). Those go through RewardCaller below.
"""
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
    last_error: str = ""

    @property
    def failures(self) -> int:
        return self.errors + self.timeouts


class RewardAccount:
    """One reward function's counters; a failure is logged, counted and scored 0 (never a crash, never a NaN)."""

    def __init__(self, name: str):
        self.name = name
        self.stats = RewardStats()
        self._lock = threading.Lock()

    def count(self, field: str, message: str = None, n: int = 1):
        """Add n to a counter; a message (a failure's cause) is kept as the last error and logged once."""
        with self._lock:
            setattr(self.stats, field, getattr(self.stats, field) + n)
            if message is not None:
                self.stats.last_error = message
        if message is not None:
            logger.warning("reward %s: %s; scored 0", self.name, message)

    def check(self, value):
        """A call's result as a float (NaN = abstained) or a dict of them; at most one error counted per call."""
        if isinstance(value, dict):
            checked = {k: self._scalar(v, f"{self.name}/{k}") for k, v in value.items()}
            bad = [problem for _, problem in checked.values() if problem]
            if bad:
                self.count("errors", bad[0])
            return {k: v for k, (v, _) in checked.items()}
        score, problem = self._scalar(value, self.name)
        if problem:
            self.count("errors", problem)
        return score

    def check_scalar(self, value, label):
        score, problem = self._scalar(value, label)
        if problem:
            self.count("errors", problem)
        return score

    @staticmethod
    def _scalar(value, label):
        """(score, problem or None)."""
        if value is None:  # abstention: kept as NaN and left out of that reward's statistics downstream
            return float("nan"), None
        try:
            number = float(value)
        except (TypeError, ValueError):
            return 0.0, f"{label} returned {value!r:.80}, not a number"
        if not math.isfinite(number):
            return 0.0, f"{label} returned {value!r}"
        return number, None


class RewardCaller(RewardAccount):
    """Calls `fn(prompt, completion, sample)` (or, through `run`, any in-process call) with a timeout.

    The call runs on a daemon thread: a call that overruns the timeout is scored 0 and its thread is abandoned but
    never joined, so it cannot keep the trainer from exiting. It cannot be killed either (Python threads cannot
    be), which is why what can hang for real should run in a process: --reward_funcs do (rewards/pooled.py), and
    envs keep their hang-prone work in their own killable processes (rewards/math.py, rewards/code.py).
    `abandoned` counts the timed-out calls still running.
    """

    def __init__(self, fn, name: str, timeout_s: float = 10.0):
        super().__init__(name)
        self.fn, self.timeout_s = fn, timeout_s
        self._abandoned = []

    @property
    def abandoned(self) -> int:
        self._abandoned = [t for t in self._abandoned if t.is_alive()]
        return len(self._abandoned)

    def __call__(self, prompt, completion, sample):
        ok, value = self.run(self.fn, prompt, completion, sample)
        return self.check(value) if ok else 0.0

    def run(self, fn, *args):
        """Call fn(*args) under this caller's timeout and counters. Returns (True, value) or (False, None)."""
        self.count("calls")
        box = {}

        def call():
            try:
                box["value"] = fn(*args)
            except BaseException as exc:  # a reward bug must not kill a multi-hour run: counted and scored 0
                box["error"] = exc

        thread = threading.Thread(target=call, name=f"reward-{self.name}", daemon=True)
        thread.start()
        thread.join(self.timeout_s)
        if thread.is_alive():
            self._abandoned.append(thread)
            self.count("timeouts", f"timed out after {self.timeout_s:g}s")
            return False, None
        if "error" in box:
            exc = box["error"]
            self.count("errors", f"raised {type(exc).__name__}: {exc}")
            return False, None
        return True, box["value"]
