"""The lite backend: AppWorld's client surface (initialize, execute, task_completed, evaluate, close) in process.

How a cell runs, and why this way. Every `execute` is one program in the code sandbox (rewards/code.py): the
apps' source (apps.py) plus a small harness. The session's state goes in on stdin and comes back on stdout: the
world as serialized SQLite bytes, the user's variables as pickles, and the source of the user's imports, functions
and classes. The harness replays the definitions, unpickles the variables, runs the cell with `apis` in scope and
sends the new state back. We chose this over a long-lived worker per episode because the sandbox is one-shot by
design (limits, user switch, subreaper clean-up per program), a killed cell then cannot leave a half-written world
behind, and a session is a value (bytes) the server can hold, copy and drop with nothing to leak. Unpickling
happens only inside the sandbox: the trusted side keeps the pickles as opaque text and only reads the database.

Semantics that follow: variables persist when they pickle (numbers, strings, lists, dicts, instances of the
user's classes); imports, functions and classes persist by replaying their definitions; a cell that raises keeps
the effects of the API calls it made before the error (as in AppWorld); a cell that times out or is killed is
rolled back entirely. The trusted side refuses unsafe code (system modules, introspection, private attributes)
before running anything, as AppWorld's own safety check does; the sandbox is the real boundary either way.
"""
import ast
import base64
import json
import os
import threading
from dataclasses import dataclass, field

from envs.appworld.lite import apps
from envs.appworld.lite.tasks import Task, evaluate, load_task
from envs.appworld.lite.world import load, supervisor

FAILED = "Execution failed. Traceback:\n"
SUCCESS = "Execution successful."
MARKER = "__CREDO_APPWORLD_CELL__"
BLOCKED_MODULES = {"os", "sys", "subprocess", "shutil", "socket", "ctypes", "multiprocessing", "threading", "signal",
                   "importlib", "builtins", "pickle", "marshal", "gc", "inspect", "io", "pathlib", "tempfile", "glob",
                   "resource", "asyncio", "code", "codeop", "types", "sqlite3", "urllib", "http", "requests", "pty",
                   "fcntl", "mmap", "selectors", "select", "platform", "sysconfig", "site", "runpy", "zipimport"}
BLOCKED_NAMES = {"open", "exec", "eval", "compile", "__import__", "globals", "locals", "vars", "getattr", "setattr",
                 "delattr", "breakpoint", "input", "exit", "quit", "help", "memoryview"}

_HARNESS = r'''
import ast as _ast, base64 as _b64, contextlib as _ctx, io as _io, json as _json, os as _os, pickle as _pickle
import sqlite3 as _sqlite3, sys as _sys, traceback as _tb, types as _types


def _cell_error(exc, source):
    if isinstance(exc, SyntaxError):
        return f"  line {exc.lineno}\n    {(exc.text or '').strip()}\nSyntaxError: {exc.msg}"
    lines, out = source.splitlines(), []
    for frame in _tb.extract_tb(exc.__traceback__):
        if frame.filename == "<cell>":
            text = lines[frame.lineno - 1].strip() if 0 < frame.lineno <= len(lines) else ""
            out.append(f'  File "<cell>", line {frame.lineno}, in {frame.name}\n    {text}')
    return "\n".join(out + [f"{type(exc).__name__}: {exc}"])


def _run(job):
    conn = _sqlite3.connect(":memory:")
    conn.deserialize(_b64.b64decode(job["db"]))
    main = _types.ModuleType("__main__")
    _sys.modules["__main__"] = main
    ns = main.__dict__
    ns["apis"] = Apis(World(conn))
    for src in job["definitions"]:
        try:
            exec(compile(src, "<definitions>", "exec"), ns)
        except BaseException:
            pass
    for name, blob in job["variables"].items():
        try:
            ns[name] = _pickle.loads(_b64.b64decode(blob))
        except BaseException:
            pass
    out, error, definitions = _io.StringIO(), None, list(job["definitions"])
    try:
        tree = _ast.parse(job["code"], "<cell>")
        definitions += [_ast.unparse(n) for n in tree.body if isinstance(n, (
            _ast.Import, _ast.ImportFrom, _ast.FunctionDef, _ast.AsyncFunctionDef, _ast.ClassDef))]
        with _ctx.redirect_stdout(out), _ctx.redirect_stderr(out):
            exec(compile(tree, "<cell>", "exec"), ns)
    except BaseException as exc:
        error = _cell_error(exc, job["code"])
    variables = {}
    for name, value in list(ns.items()):
        if name.startswith("__") or name == "apis":
            continue
        try:
            blob = _pickle.dumps(value)
        except BaseException:
            continue
        if len(blob) <= 1 << 20:
            variables[name] = _b64.b64encode(blob).decode()
    conn.commit()
    return {"output": out.getvalue(), "error": error, "db": _b64.b64encode(conn.serialize()).decode(),
            "variables": variables, "definitions": list(dict.fromkeys(definitions))}


_result = _run(_json.loads(_sys.stdin.read()))
_os.write(1, ("\n" + MARKER + _json.dumps(_result) + "\n").encode())
'''


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


_PROGRAM = None


def program() -> str:
    global _PROGRAM
    if _PROGRAM is None:
        with open(apps.__file__) as f:
            _PROGRAM = f.read() + f"\nMARKER = {MARKER!r}\n" + _HARNESS
    return _PROGRAM


@dataclass
class Session:
    task: Task
    db: bytes
    variables: dict = field(default_factory=dict)
    definitions: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class LiteBackend:
    """Sessions keyed by task id, like AppWorld's server; one episode at a time per task id per backend."""
    memory_mb = 1024

    def __init__(self):
        self.sessions = {}
        self.timeout_s = float(os.environ.get("CREDO_APPWORLD_CELL_TIMEOUT", "5"))  # seconds per cell

    def _session(self, task_id: str) -> Session:
        if task_id not in self.sessions:
            raise KeyError(f"task {task_id!r} is not initialized")
        return self.sessions[task_id]

    def initialize(self, task_id: str, experiment_name: str = "credo") -> dict:
        task = load_task(task_id)
        self.sessions[task_id] = Session(task, task.db)
        return {"task_id": task_id, "instruction": task.instruction, "supervisor": supervisor(load(task.db)),
                "difficulty": task.difficulty,
                "app_descriptions": [{"name": n, "description": a["description"]} for n, a in apps.APPS.items()]}

    def execute(self, task_id: str, code: str) -> str:
        from rewards.code import (
            execute,  # imported here: the HTTP server and tests need nothing else from rewards
        )
        session = self._session(task_id)
        reason = unsafe_reason(code)
        if reason:
            return FAILED + reason
        with session.lock:
            job = {"db": base64.b64encode(session.db).decode(), "variables": session.variables,
                   "definitions": session.definitions, "code": code}
            result = execute(program(), stdin=json.dumps(job), timeout_s=self.timeout_s, memory_mb=self.memory_mb,
                             max_output_bytes=64 << 20)
            reply = None
            for line in reversed(result.stdout.splitlines()):
                if line.startswith(MARKER):
                    reply = json.loads(line[len(MARKER):])
                    break
            if reply is None:  # timeout, memory, killed: the cell is rolled back
                why = {"timeout": f"TimeoutError: the cell ran longer than {self.timeout_s:g} seconds",
                       "memory": "MemoryError: the cell ran out of memory"}.get(result.status)
                tail = result.stderr.strip().splitlines()[-1:] or [result.status]
                return FAILED + (why or f"the cell was stopped ({tail[0]})") + "; none of its effects were kept."
            session.db = base64.b64decode(reply["db"])
            session.variables, session.definitions = reply["variables"], reply["definitions"]
        output = reply["output"]
        if reply["error"]:
            return output + FAILED + reply["error"]
        return output.rstrip("\n") if output.strip() else SUCCESS

    def task_completed(self, task_id: str) -> bool:
        return bool(load(self._session(task_id).db).execute("SELECT completed FROM task_status").fetchone()[0])

    def evaluate(self, task_id: str, suppress_errors: bool = True) -> dict:
        session = self._session(task_id)
        return evaluate(session.task, session.db)

    def close(self, task_id: str) -> None:
        self.sessions.pop(task_id, None)
