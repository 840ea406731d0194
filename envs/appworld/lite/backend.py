"""The lite backend: AppWorld's client surface (initialize, execute, task_completed, evaluate, close) in process.

How a cell runs, and why this way. The world never enters the cell's process. Every `execute` starts a world host
(host.py: a short-lived, limited process that holds the database and the apps) and the host starts the cell in a
bubblewrap sandbox (jail.py) where `apis` is a proxy (cell.py): each API call is (app, api, kwargs) as JSON over a
pipe, answered with JSON. The cell has no SQL, no world objects to introspect, and no view of the checkout (tasks.py
with the checks and reference solutions is not there). When the cell ends, the host keeps or rolls back its effects
and judges the world (schema checked against the seed, every query under a deadline); its reply is checked
(protocol.py) before this side uses any of it, and the whole host is killed if it overruns. A session is a value
(the world's bytes, the shell's pickles kept as opaque text, the source of its definitions) with nothing to leak;
unpickling happens only in the sandbox.

Semantics: variables persist when they pickle (numbers, strings, lists, dicts, instances of the user's classes);
imports, functions and classes persist by replaying their definitions; a cell that raises keeps the effects of the
API calls it made before the error (as in AppWorld); a cell that times out, runs out of memory or is killed is
rolled back entirely; a cell that writes to the proxy's pipe itself (a forged reply) forfeits the task: the episode
ends, scored 0, and no error is raised, so a policy cannot abort training through --max_reward_error_rate. What a
cell prints is plain text, never parsed. The trusted side also refuses obviously unsafe code (system modules,
introspection, private attributes) before running anything, as AppWorld's own safety check does; that filter is a
courtesy (hostile cells get past it: tests/envs/test_appworld_hostile.py), the sandbox and the proxy are the boundary.
"""
import ast
import base64
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace

from envs.appworld.flags import CELL_TIMEOUT_VARIABLE
from envs.appworld.lite import apps, jail, protocol
from envs.appworld.lite.host import judge, rejected
from envs.appworld.lite.tasks import Task, load_task
from envs.appworld.lite.world import load, supervisor

logger = logging.getLogger(__name__)
FAILED = "Execution failed. Traceback:\n"
SUCCESS = "Execution successful."
HOST_GRACE_S = 2.0  # the host's start-up and the sandbox's, on top of the cell's and the evaluation's time

BLOCKED_MODULES = {"os", "sys", "subprocess", "shutil", "socket", "ctypes", "multiprocessing", "threading", "signal",
                   "importlib", "builtins", "pickle", "marshal", "gc", "inspect", "io", "pathlib", "tempfile", "glob",
                   "resource", "asyncio", "code", "codeop", "types", "sqlite3", "urllib", "http", "requests", "pty",
                   "fcntl", "mmap", "selectors", "select", "platform", "sysconfig", "site", "runpy", "zipimport"}
BLOCKED_NAMES = {"open", "exec", "eval", "compile", "__import__", "globals", "locals", "vars", "getattr", "setattr",
                 "delattr", "breakpoint", "input", "exit", "quit", "help", "memoryview"}


_AST_LOCK = threading.Lock()


def unsafe_reason(code: str):
    """Why `code` may not run (a system module, an introspection builtin, a private attribute), or None."""
    try:
        with _AST_LOCK:  # CPython 3.11's parser is not thread-safe ("AST constructor recursion depth mismatch")
            tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None  # the harness reports the syntax error as a failed cell
    for node in ast.walk(tree):
        modules = []
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or ""]
        for module in modules:
            if module.split(".")[0] in BLOCKED_MODULES or node.__class__ is ast.ImportFrom and node.level:
                return f"Usage of the module {module!r} is not allowed in this environment."
        if isinstance(node, ast.Name) and node.id in BLOCKED_NAMES:
            return f"Usage of the function {node.id!r} is not allowed in this environment."
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            return f"Access to the private attribute {node.attr!r} is not allowed in this environment."
        if isinstance(node, ast.Name) and node.id.startswith("__"):
            return f"Usage of the name {node.id!r} is not allowed in this environment."
    return None


@dataclass
class Session:
    task: Task
    db: bytes
    variables: dict = field(default_factory=dict)
    definitions: list = field(default_factory=list)
    completed: bool = False
    evaluation: dict = None   # of `db`, as the host judged it; None until judged
    forfeit: str = None       # why the task was forfeited, if it was
    lock: threading.Lock = field(default_factory=threading.Lock)


class LiteBackend:
    """Sessions keyed by task id, like AppWorld's server; one episode at a time per task id per backend.

    The defaults keep a whole env.step (cell, judging, start-up) under RewardCaller's 10 s timeout, so a step
    ends on its own and never leaves a reward thread behind."""
    memory_mb = 1024       # the cell's memory (its cgroup where there is one, else per process)
    eval_timeout_s = 2.0   # judging the world after each cell

    def __init__(self):
        jail.require_sandbox()
        self.sessions = {}
        self.timeout_s = float(os.environ.get(CELL_TIMEOUT_VARIABLE, "5"))  # seconds per cell, checked at flag parsing

    def _session(self, task_id: str) -> Session:
        if task_id not in self.sessions:
            raise KeyError(f"task {task_id!r} is not initialized")
        return self.sessions[task_id]

    def initialize(self, task_id: str, experiment_name: str = "credo") -> dict:
        task = load_task(task_id)
        # the seed is ours, never touched by a cell: judged here; every later world is judged by its host
        completed, evaluation = judge(task, task.db, time.monotonic() + 60)
        self.sessions[task_id] = Session(task, task.db, completed=completed, evaluation=evaluation)
        return {"task_id": task_id, "instruction": task.instruction, "supervisor": supervisor(load(task.db)),
                "difficulty": task.difficulty,
                "app_descriptions": [{"name": n, "description": a["description"]} for n, a in apps.APPS.items()]}

    def _host(self, job: dict, timeout_s: float):
        """The world host's checked reply to `job`, or (None, why) when it overran, crashed or answered garbage."""
        proc = subprocess.Popen([sys.executable, "-m", "envs.appworld.lite.host"], cwd=jail.REPO_ROOT,
                                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": jail.REPO_ROOT},
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            out, err = proc.communicate(json.dumps(job).encode(), timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the sandboxed cell dies with it (bwrap --die-with-parent)
            proc.communicate()
            jail.Cgroup.remove_left_by(proc.pid)
            return None, f"the world host ran past {timeout_s:g} seconds"
        try:
            return protocol.check_host_reply(out.decode("utf-8", "replace")), None
        except protocol.ProtocolError as exc:
            tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
            logger.warning("AppWorld lite world host failed (%s): %s", exc, tail[0])
            return None, f"the world host failed ({tail[0]})"

    def execute(self, task_id: str, code: str) -> str:
        return self._execute(self._session(task_id), code)

    def _execute(self, session: Session, code: str) -> str:
        reason = unsafe_reason(code)
        if reason:
            return FAILED + reason
        with session.lock:
            if session.forfeit:
                return FAILED + f"the task was forfeited ({session.forfeit}); nothing runs any more."
            job = {"op": "execute", "task_id": session.task.task_id, "db": _b64(session.db),
                   "variables": session.variables,
                   "definitions": session.definitions, "code": code, "timeout_s": self.timeout_s,
                   "memory_mb": self.memory_mb, "eval_timeout_s": self.eval_timeout_s}
            reply, why = self._host(job, self.timeout_s + self.eval_timeout_s + HOST_GRACE_S)
            if reply is None:
                return FAILED + f"{why}; none of the cell's effects were kept."
            if reply["db"] is not None:
                session.db, session.variables, session.definitions = reply["db"], reply["variables"], \
                    reply["definitions"]
            session.completed, session.evaluation = reply["completed"], reply["evaluation"]
            if reply["status"] == "forfeit":
                session.forfeit = reply["error"]
        return self._render(reply)

    def _render(self, reply: dict) -> str:
        status, output, error = reply["status"], reply["output"], reply["error"]
        if status == "timeout":
            return FAILED + f"TimeoutError: the cell ran longer than {self.timeout_s:g} seconds; none of its " \
                            "effects were kept."
        if status == "memory":
            return FAILED + "MemoryError: the cell ran out of memory; none of its effects were kept."
        if status == "killed":
            return FAILED + f"the cell was stopped ({error}); none of its effects were kept."
        if status == "forfeit":
            return FAILED + f"the cell wrote to the sandbox's API pipe itself ({error}): the task is forfeited " \
                            "(scored 0)."
        if error:
            return output + FAILED + error
        return output.rstrip("\n") if output.strip() else SUCCESS

    def task_completed(self, task_id: str) -> bool:
        return self._judged(task_id).completed

    def evaluate(self, task_id: str, suppress_errors: bool = True) -> dict:
        return dict(self._judged(task_id).evaluation)

    def _judged(self, task_id: str) -> Session:
        return self._judge(self._session(task_id))

    def _judge(self, session: Session) -> Session:
        """The session with its world judged (by the last cell's host, else by a host started for it now)."""
        task_id = session.task.task_id
        with session.lock:
            if session.evaluation is None:
                job = {"op": "evaluate", "task_id": task_id, "db": _b64(session.db),
                       "eval_timeout_s": self.eval_timeout_s}
                reply, why = self._host(job, self.eval_timeout_s + HOST_GRACE_S)
                if reply is None:  # a world that cannot be judged earns nothing (and is no reward error)
                    logger.warning("AppWorld lite could not judge %s: %s; scored 0", task_id, why)
                    reply = {"completed": True, "evaluation": rejected(session.task, f"not judged: {why}")}
                session.completed, session.evaluation = reply["completed"], reply["evaluation"]
        return session

    def close(self, task_id: str) -> None:
        self.sessions.pop(task_id, None)

    # ---- saved states: TCPO's counterfactual alternatives (envs/appworld/env.py score_turn_at) -------------------
    def save_state(self, task_id: str) -> Session:
        """The task's session as it is now, as a copy that later cells of the episode do not change. A session is a
        value (the world's bytes, the shell's pickles as text, its definitions' source), so this is the whole state
        AppWorld's own save_state keeps and the shell's too (which AppWorld's load_state does not restore)."""
        session = self._session(task_id)
        with session.lock:
            return _copy(session)

    def try_cell(self, state: Session, code) -> dict:
        """The evaluation of the world after `code` runs in a throw-away copy of `state` (code None: of `state` as it
        is, as a turn without a code block gets). Nothing is kept: neither `state` nor any live session changes,
        and the copy is dropped. The cell runs exactly as `execute` runs it (same host, sandbox and limits)."""
        fork = _copy(state)
        if code is not None:
            self._execute(fork, code)
        return dict(self._judge(fork).evaluation)


def _copy(session: Session) -> Session:
    """An independent session with the same state (bytes and strings are immutable; containers are copied)."""
    return replace(session, variables=dict(session.variables), definitions=list(session.definitions),
                   evaluation=None if session.evaluation is None else dict(session.evaluation),
                   lock=threading.Lock())


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
