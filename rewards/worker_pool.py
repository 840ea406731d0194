"""A small pool of killable worker processes for reward calls (rewards/reward_worker.py is the worker).

Why processes: a Python thread cannot be stopped, so a reward that hangs (a sleep, a sympy call stuck in C, a
request that never returns) would keep its thread, a core and the trainer's exit hostage. Here each call runs in
a worker process with a per-call deadline; a call that overruns it gets its worker's whole process group killed
(children the function started included), is reported as a timeout, and the slot gets a fresh worker. Up to
`workers` calls run at once, so a step whose calls all hang costs about one timeout, not one per call.

Workers are started on first use, load every target once (so an import's cost is not billed to a call's
deadline), live in their own session (a terminal's Ctrl-C reaches the trainer, which finishes the step, not the
workers), exit when the trainer is gone (they watch their parent) and are killed at interpreter exit.

A call that fails outside the response (its worker died or did not start, a garbled reply, the function raised
OSError / MemoryError / InfrastructureError or could not be loaded, or it ran past its deadline: rewards/base.py)
is run once more on a fresh or idle worker after the others are done (`retries`, 1 by default); its Outcome then
says `retried`, and the retry's result is the call's. The retries of a step run at once too, so a step whose calls
all hang costs about two timeouts.
"""
import atexit
import json
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time
import weakref
from dataclasses import dataclass

from rewards.base import RETRIED_STATUSES

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Loading targets (importing a user's module, math-verify's sympy) may take a while on a busy machine; it is not
# a call's time. credo's reading: a minute, after which the worker counts as failed to start.
STARTUP_TIMEOUT_S = 60.0
_LIVE_POOLS = weakref.WeakSet()


@dataclass
class Outcome:
    status: str              # "ok", "error" (the function's own), "timeout" or "infra" (outside the response)
    value: object = None     # the call's JSON-decoded result when ok, else the error message
    retried: bool = False    # the first attempt failed outside the response; this is the retry's outcome
    first_failure: str = ""  # that first attempt's error message


class _Worker:
    def __init__(self, targets):
        env = dict(os.environ, PYTHONPATH=_REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   OMP_NUM_THREADS="1")
        self.proc = subprocess.Popen([sys.executable, "-m", "rewards.reward_worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, start_new_session=True)
        self.buffer = b""
        self.started, self.ready = time.monotonic(), False
        self.load_errors = {}
        self.send({"sys_path": list(sys.path), "targets": targets, "parent": os.getpid()})

    def fileno(self):
        return self.proc.stdout.fileno()

    def send(self, obj):
        self.send_frame(pickle.dumps(obj))

    def send_frame(self, data: bytes):
        self.proc.stdin.write(struct.pack("<I", len(data)) + data)
        self.proc.stdin.flush()

    def read_lines(self) -> list:
        """The complete reply lines available now; EOFError when the worker has exited."""
        chunk = os.read(self.fileno(), 1 << 16)
        if not chunk:
            raise EOFError
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        return [json.loads(line) for line in lines]

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass

    def exit_reason(self) -> str:
        try:  # its stdout closed: it is exiting, give it a moment to be reaped
            code = self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            code = None
        if code is not None and code < 0:
            return f"the reward worker was killed by {signal.Signals(-code).name}"
        return f"the reward worker exited (code {code})"


class WorkerPool:
    """Runs calls of `targets` (("import", "pkg.module:fn") or ("pickle", bytes)) in up to `workers` processes.

    Thread-safe: callers on several threads each check out their own workers.
    """

    def __init__(self, targets: list, workers: int, timeout_s: float, retries: int = 1):
        """retries: how many times (0 or 1) a call that failed outside the response is run again."""
        self.targets, self.workers, self.timeout_s, self.retries = list(targets), workers, timeout_s, retries
        self._free = [None] * workers  # started workers, or None for a slot that starts one when needed
        self._cond = threading.Condition()
        _LIVE_POOLS.add(self)

    def map(self, calls: list, retry: bool = True) -> list:
        """calls: [(target_index, args, kwargs)] -> [Outcome] in the same order, each within its deadline. `retry`
        False: no call is run again (the controls of rewards/pooled.py: one more timeout is all they may cost)."""
        if not calls:
            return []
        slots = self._checkout(min(len(calls), self.workers))
        try:
            results = self._run(calls, slots)
            again = [i for i, o in enumerate(results) if o.status in RETRIED_STATUSES] if self.retries and retry else []
            if again:
                for i, outcome in zip(again, self._run([calls[i] for i in again], slots)):
                    outcome.retried, outcome.first_failure = True, str(results[i].value)
                    results[i] = outcome
            return results
        finally:
            self._checkin(slots)

    def _checkout(self, n: int) -> list:
        with self._cond:
            self._cond.wait_for(lambda: self._free)
            taken, self._free = self._free[:n], self._free[n:]
            return taken

    def _checkin(self, slots: list):
        with self._cond:
            self._free += slots
            self._cond.notify_all()

    def _run(self, calls, slots) -> list:
        results = [None] * len(calls)
        pending = list(range(len(calls)))[::-1]  # popped from the end: call order
        busy, starting = {}, {}                   # worker -> (call index, deadline) / worker -> startup deadline
        startup_error = None

        def refill():  # empty or dead slots start a worker while calls remain; loading ones keep loading
            for k, worker in enumerate(slots):
                if worker is not None and worker not in busy and worker not in starting and worker.proc.poll() is not None:
                    worker.kill()
                    slots[k] = worker = None
                if worker is None and pending and startup_error is None:
                    slots[k] = worker = _Worker(self.targets)
                if worker is not None and not worker.ready:
                    starting[worker] = worker.started + STARTUP_TIMEOUT_S

        def drop(worker):
            worker.kill()
            slots[slots.index(worker)] = None

        refill()
        while (pending and startup_error is None) or busy:
            for worker in slots:
                if pending and startup_error is None and worker is not None and worker.ready and worker not in busy:
                    index = pending.pop()
                    try:
                        frame = pickle.dumps(calls[index])
                    except Exception as exc:  # e.g. a dataset row holding an object that cannot be pickled
                        results[index] = Outcome("error", f"its arguments cannot be sent to a worker: {exc}")
                        continue
                    try:
                        worker.send_frame(frame)
                    except OSError:  # it died while idle: the call goes to a fresh worker
                        pending.append(index)
                        drop(worker)
                        continue
                    busy[worker] = (index, time.monotonic() + self.timeout_s)
            if not busy and not starting:
                break
            deadline = min([d for _, d in busy.values()] + list(starting.values()))
            readable, _, _ = select.select(list(busy) + list(starting), [], [], max(0.0, deadline - time.monotonic()))
            for worker in readable:
                try:
                    lines = worker.read_lines()
                except (EOFError, ValueError, OSError) as exc:
                    reason = worker.exit_reason() if isinstance(exc, EOFError) else f"a bad reply ({exc})"
                    if starting.pop(worker, None) is not None:
                        startup_error = f"a reward worker failed to start: {reason}"
                    else:
                        results[busy.pop(worker)[0]] = Outcome("infra", f"{reason} during the call")
                    drop(worker)
                    continue
                for line in lines:
                    if starting.pop(worker, None) is not None:
                        worker.ready, worker.load_errors = True, line.get("load_errors", {})
                    elif worker in busy:
                        index, _ = busy.pop(worker)
                        results[index] = Outcome("ok", line["value"]) if "value" in line else \
                            Outcome("infra" if line.get("infra") else "error", line.get("error", "a malformed reply"))
            now = time.monotonic()
            for worker, (index, deadline) in list(busy.items()):
                if now >= deadline:
                    del busy[worker]
                    results[index] = Outcome("timeout", f"no result within {self.timeout_s:g}s (its worker was killed)")
                    drop(worker)
            for worker, deadline in list(starting.items()):
                if now >= deadline:
                    del starting[worker]
                    startup_error = f"a reward worker did not load its functions within {STARTUP_TIMEOUT_S:g}s"
                    drop(worker)
            refill()
        for index in pending:
            results[index] = Outcome("infra", startup_error or "not run")
        return results

    def close(self):
        with self._cond:
            workers, self._free = [w for w in self._free if w is not None], [None] * self.workers
        for worker in workers:
            worker.kill()


@atexit.register
def _close_all_pools():
    """Workers are separate processes: kill them at exit rather than leave them behind."""
    for pool in list(_LIVE_POOLS):
        pool.close()
