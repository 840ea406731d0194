"""Math-answer verifier on math-verify, run in a killable worker process.

math-verify's own timeouts use SIGALRM, which only works on a main thread and cannot stop a sympy call that
hangs in C. So the parse/verify work runs in a child process (rewards/math_worker.py) where those signals
work, and the parent enforces a hard per-call deadline: a call that overruns it kills the worker, is counted
as a timeout and scored 0, and the next call starts a fresh worker.
"""
import json
import logging
import os
import select
import subprocess
import sys
import threading

from rewards.base import RewardStats

logger = logging.getLogger(__name__)
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class MathVerifier:
    """Scores 1.0 when the completion's final answer is mathematically equal to sample[answer_key]."""
    name = "correctness"

    def __init__(self, answer_key: str = "answer", timeout_s: float = 10.0):
        self.answer_key, self.timeout_s = answer_key, timeout_s
        self.stats = RewardStats()
        self._proc = None
        self._lock = threading.Lock()  # one worker process, one request at a time (env steps may be threaded)

    def __call__(self, prompt, completion, sample) -> float:
        return self.verify(str(sample[self.answer_key]), completion)

    def verify(self, gold: str, completion: str) -> float:
        """1.0 if `completion` (free text; its last \\boxed{} or expression) equals the gold answer (LaTeX)."""
        with self._lock:
            return self._verify(gold, completion)

    def _verify(self, gold: str, completion: str) -> float:
        self.stats.calls += 1
        try:
            reply = self._request({"gold": gold, "completion": completion})
        except TimeoutError:
            self.stats.timeouts += 1
            logger.warning("math verifier timed out after %.1fs; scored 0", self.timeout_s)
            self.close()
            return 0.0
        except (OSError, ValueError) as exc:
            self.stats.errors += 1
            logger.warning("math verifier worker failed (%s); scored 0", exc)
            self.close()
            return 0.0
        if "error" in reply:
            self.stats.errors += 1
            logger.warning("math verifier error: %s; scored 0", reply["error"])
            return 0.0
        return 1.0 if reply["correct"] else 0.0

    def _request(self, payload: dict) -> dict:
        if self._proc is None or self._proc.poll() is not None:
            env = dict(os.environ, PYTHONPATH=_REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
                       OMP_NUM_THREADS="1")
            self._proc = subprocess.Popen([sys.executable, "-m", "rewards.math_worker"], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, text=True, env=env, cwd=_REPO_ROOT)
        self._proc.stdin.write(json.dumps(payload) + "\n")
        self._proc.stdin.flush()
        # The first call also pays the worker's import of math-verify (about 1 s); allow for it.
        ready, _, _ = select.select([self._proc.stdout], [], [], self.timeout_s + 30.0 * (self.stats.calls == 1))
        if not ready:
            raise TimeoutError
        line = self._proc.stdout.readline()
        if not line:
            raise OSError("worker exited")
        return json.loads(line)

    def close(self):
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
