"""Reward accounting (calls, errors, timeouts, the last error) and the in-process call wrapper for env steps.

--reward_funcs run in killable worker processes (rewards/pooled.py); what stays in-process is what cannot move
to another process: an env's step (a stateful per-episode object holding the conversation, and often live
resources: a sandbox, an HTTP client, the math worker) and MAESTRO's ppl / ent / pref (they need the policy's or
a reward model's tensors). Those go through RewardCaller below.

Whose failure is it (issue #51 item 3)? A call that fails outside the response -- its worker process died (the
OOM killer, a segfault), the function raised OSError / MemoryError / InfrastructureError (a sandbox that did not
start, a remote verifier that is down, a missing tool), or it ran past its deadline -- is retried once: when the
retry succeeds its score is used ("recovered"); a failure that repeats on the same response is that response's and
scores 0, so that no output can buy an abstention by breaking its verifier. A failure the response causes (the
function raised an ordinary exception on it, returned a non-number) scores 0 at once. rl/scoring.py stops the run
when a step's calls of one function all failed outside the response, twice: the verifier is down, and scoring
anyone 0 would train on noise. What the response itself does inside a verifier (a wrong answer, its program's
timeout or crash in the sandbox) is a score of 0, not a failure, and never reaches this accounting.

A response can also break the function itself (issue #62): print `sNaN` where a comparator reads Decimals, nest a
JSON argument 1,000 deep, write a 5,000-digit integer. Counted as the function's errors, such responses would count
against --max_reward_error_rate, and a policy could learn to stop its own training. So a call that raised an
ordinary exception gets a control call, the same function, row and code path on an ordinary response (the empty
one), when the function has scored some response before (this step or earlier). When the control succeeds, the
failure was the response's: it scores as a wrong response (0, or the function's floor where the empty response
scores lower: tool_correct's -3 in ToolRL mode) and is counted as `malformed`, apart from the failures, so it never
stops the run. Otherwise it is an error as before, and errors may stop it: a function that fails on the empty
response fails on ordinary inputs, and one that has never scored a response may be broken on every real one while
it answers the empty one early. Timeouts and failures outside the response get no control: an outage looks like
them, and the empty response need not reach the judge (a code env never runs the sandbox on it), so they keep the
retry and the down rule; a response that kills its worker twice or hangs its function counts as before.
"""
import logging
import math
import threading
from dataclasses import dataclass

logger = logging.getLogger(__name__)


class InfrastructureError(RuntimeError):
    """Raise it from a reward function, a verifier or an env step to say a call failed outside the response (a
    sandbox that did not start, a remote verifier that answered 503): the call is retried once, and only a failure
    that repeats is scored as the response's. OSError (ConnectionError, a missing executable's FileNotFoundError,
    requests' and urllib's errors) and MemoryError count the same way."""


def is_infrastructure(exc: BaseException) -> bool:
    """credo's reading of "a failure outside the response": what the OS or a remote service refused, not what a
    function made of the response. A response can still trigger one (a parse that exhausts memory); the retry,
    which fails again on the same response, makes that the response's."""
    return isinstance(exc, (InfrastructureError, OSError, MemoryError))


# How a finished call ended (rewards/worker_pool.Outcome.status and RewardCaller) -> the counter of a failure:
#   error   the function raised an ordinary exception on this response or returned a non-number: the response's
#   timeout it ran past its deadline, on its retry too
#   infra   it failed outside the response (module docstring), on its retry too
FAILURE_FIELDS = {"error": "errors", "timeout": "timeouts", "infra": "infra"}
RETRIED_STATUSES = ("timeout", "infra")  # the failures that may be the infrastructure's: retried once
MALFORMED = "malformed"  # it raised on this response while its control (the empty response) scored: not a failure
CONTROL_COMPLETION = ""  # the control's ordinary response (module docstring)
CONTROLLED_STATUS = "error"  # the one failure a control may show to be the response's (module docstring)


def floor_score(control_value):
    """What a response that broke its function scores: 0, or less where the function gives the empty response less
    (its floor), per component of a dict; never more, since the empty response may score high (a length reward)."""
    if isinstance(control_value, dict):
        return {k: floor_score(v) for k, v in control_value.items()}
    try:
        number = float(control_value)
    except (TypeError, ValueError):
        return 0.0
    return min(0.0, number) if math.isfinite(number) else 0.0


@dataclass
class RewardStats:
    calls: int = 0
    errors: int = 0     # failures the response caused (not retried)
    timeouts: int = 0   # past the deadline twice (once with --reward_retries 0)
    infra: int = 0      # outside the response twice (once with --reward_retries 0)
    retried: int = 0    # calls retried after a failure outside the response
    recovered: int = 0  # ... whose retry succeeded: its score was used
    malformed: int = 0  # the response broke the function, which scored the empty one: not a failure (docstring)
    last_error: str = ""

    @property
    def failures(self) -> int:
        """Calls scored 0 by a failure (a recovered call is not one)."""
        return self.errors + self.timeouts + self.infra

    @property
    def outside(self) -> int:
        """Failures outside the response that repeated on the retry: all of a step's calls -> the verifier is down."""
        return self.timeouts + self.infra


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

    @property
    def scored(self) -> int:
        """Calls that scored their response: neither failed nor broken by it (a control needs one: docstring)."""
        return self.stats.calls - self.stats.failures - self.stats.malformed

    def settle(self, status: str, message, retried: bool = False, n: int = 1):
        """Count one finished call that scored n completions: its status ("ok" or a FAILURE_FIELDS key, after any
        retry), whether it was retried, and a failure's message."""
        self.count("calls", n=n)
        if retried:
            self.count("retried", n=n)
            if status == "ok":
                self.count("recovered", n=n)
        if status == MALFORMED:  # the response's doing: logged, never the function's last error
            self.count("malformed", n=n)
            logger.info("reward %s: a response broke it (%s); scored as a wrong response", self.name, message)
        elif status != "ok":
            self.count(FAILURE_FIELDS[status], message, n=n)

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

    A call that raised a failure outside the response (is_infrastructure) is called again, `retries` (0 or 1)
    times; a timed-out one is not, since its abandoned thread may still be working on the same object (an env's
    episode). An env step that raises one must not have advanced its episode first: VerifyAndRefineEnv scores a
    turn before it counts it. A call that raised an ordinary exception runs its `control` (module docstring).
    """

    def __init__(self, fn, name: str, timeout_s: float = 10.0, retries: int = 1):
        super().__init__(name)
        self.fn, self.timeout_s, self.retries = fn, timeout_s, retries
        self._abandoned = []

    @property
    def abandoned(self) -> int:
        self._abandoned = [t for t in self._abandoned if t.is_alive()]
        return len(self._abandoned)

    def __call__(self, prompt, completion, sample):
        ok, value = self.run(self.fn, prompt, completion, sample,
                             control=lambda: self.fn(prompt, CONTROL_COMPLETION, sample))
        return self.check(value) if ok else 0.0

    def run(self, fn, *args, retry: bool = True, control=None):
        """Call fn(*args) under this caller's timeout, retry (unless `retry` is False: a call that must not run twice)
        and counters. `control`: a call without arguments that runs the same code on the empty response (module
        docstring), run when the call raised an ordinary exception. Returns (True, value) or (False, None)."""
        status, value = self._attempt(fn, args)
        retried = retry and status == "infra" and self.retries > 0
        if retried:
            logger.info("reward %s: %s; retrying once", self.name, value)
            status, value = self._attempt(fn, args)
        if status == CONTROLLED_STATUS and control is not None and self.scored > 0 \
                and self._attempt(control, ())[0] == "ok":
            status = MALFORMED
        self.settle(status, None if status == "ok" else value, retried)
        return (True, value) if status == "ok" else (False, None)

    def _attempt(self, fn, args):
        """(status, value or failure message) of one call on a thread of its own."""
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
            return "timeout", f"timed out after {self.timeout_s:g}s"
        if "error" in box:
            exc = box["error"]
            return ("infra" if is_infrastructure(exc) else "error"), f"raised {type(exc).__name__}: {exc}"
        return "ok", box["value"]
