"""The world host: one short-lived, limited process per cell (or per evaluation), started by backend.LiteBackend.

    python -m envs.appworld.lite.host   < job JSON   > reply JSON (protocol.check_host_reply)

It holds the world's database and the apps (apps.py), starts the cell in the sandbox (jail.py) with the shell's
state on its stdin, answers the cell's API calls arriving over a pipe (protocol.check_call), and when the cell ends
keeps its effects (or rolls them back: timeout, memory, killed, forfeit), then judges the world: the task's checks
(tasks.evaluate) behind a schema check against the seed and a deadline on every query. The trainer only ever sees
the reply, checked again there, and kills this process's whole group if it overruns.
"""
import base64
import json
import os
import select
import signal
import sqlite3
import subprocess
import sys
import threading
import time

from envs.appworld.lite import apps, jail, protocol, registry
from envs.appworld.lite.tasks import evaluate, load_task
from envs.appworld.lite.world import load

CELL_SOURCE_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cell.py")
MAX_CALLS = 5000        # API calls per cell; more get 429
HOST_MEMORY_MB = 1024   # this process's own address space
PROGRESS_OPS = 20000    # SQLite VM steps between deadline checks


class Deadline(Exception):
    pass


def connect_until(deadline: float):
    """load() whose every query is aborted past `deadline` (SQLite calls back every PROGRESS_OPS steps; a Python
    signal cannot interrupt a query running in C, an endless view included)."""
    def connect(data: bytes) -> sqlite3.Connection:
        conn = load(data)
        conn.set_progress_handler(lambda: int(time.monotonic() > deadline), PROGRESS_OPS)
        return conn
    return connect


def schema(conn) -> list:
    return conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name").fetchall()


def judge(task, db: bytes, deadline: float) -> tuple:
    """(completed, evaluation) of the world `db`, or a rejection (every check failed) when its schema is not the
    seed's (a table swapped for a view, a trigger added) or its bookkeeping is malformed, or time runs out."""
    connect = connect_until(deadline)
    try:
        after = connect(db)
        if schema(after) != schema(connect(task.db)):
            return True, rejected(task, "the world's schema differs from the seed's")
        rows = after.execute("SELECT completed FROM task_status").fetchall()
        if len(rows) != 1:
            return True, rejected(task, "task_status must hold exactly one row")
        evaluation = evaluate(task, db, connect)
        if time.monotonic() > deadline:  # a check cut short by the deadline counts as failed: fail them all
            return True, rejected(task, "evaluation ran out of time")
        return bool(rows[0][0]), evaluation
    except sqlite3.OperationalError as exc:
        if time.monotonic() > deadline:
            return True, rejected(task, "evaluation ran out of time")
        return True, rejected(task, f"the world cannot be read ({exc})")
    except sqlite3.DatabaseError as exc:
        return True, rejected(task, f"the world cannot be read ({exc})")


def rejected(task, why: str) -> dict:
    return {"success": False, "pass_count": 0, "num_tests": len(task.checks), "passes": [], "failures": [why],
            "difficulty": task.difficulty}


def answer(world, message: dict, calls: int) -> dict:
    app, api, kwargs = protocol.check_call(message)
    if calls > MAX_CALLS:
        return {"error": [429, f"more than {MAX_CALLS} API calls in one cell"]}
    try:
        return {"ok": world.call(app, api, kwargs)}
    except registry.ApiError as exc:
        return {"error": [exc.status, exc.message]}
    except sqlite3.DatabaseError as exc:
        if "full" in str(exc):
            return {"error": [507, f"the world's storage is full ({protocol.MAX_DB_BYTES >> 20} MiB)"]}
        if "interrupted" in str(exc):  # the progress handler's deadline (run_execute): the cell's time is up
            raise Deadline() from None
        return internal_error(app, api, exc)
    except Deadline:
        raise
    except Exception as exc:
        return internal_error(app, api, exc)


def internal_error(app: str, api: str, exc: Exception) -> dict:
    """A 500, as a web API answers its own failure: the cell sees it and the host keeps serving. Bad arguments get
    a 422 from registry._check before any handler runs (tests/envs/test_appworld_host.py sweeps every API's every
    parameter with hostile values and allows no 500), so this is only the backstop that keeps the cell's earlier
    effects and a reward from being dropped by a crashed host."""
    return {"error": [500, f"internal error in {app}.{api}: {type(exc).__name__}: {str(exc)[:300]}"]}


class CellRun:
    """One cell in the sandbox against `world`, until it ends, overruns `timeout_s` or breaks the protocol."""

    def __init__(self, world, job: dict):
        self.world, self.job = world, job
        self.status, self.why, self.done, self.calls = None, None, None, 0
        self.output, self.truncated = bytearray(), False

    def run(self):
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        python, _ = jail.cell_python()
        with open(CELL_SOURCE_PATH) as f:
            source = f.read()
        memory_mb, timeout_s = self.job["memory_mb"], self.job["timeout_s"]
        cgroup = jail.Cgroup(memory_mb)

        def limits():
            cgroup.enter()
            jail.set_rlimits(memory_mb, int(timeout_s) + 1)
        proc = subprocess.Popen(jail.bwrap_argv([python, "-I", "-S", "-c", source, str(req_w), str(rep_r)]),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                pass_fds=(req_w, rep_r), preexec_fn=limits, env=jail.CELL_ENV)
        os.close(req_w)
        os.close(rep_r)
        shell = {"apps": list(apps.APPS), "code": self.job["code"], "variables": self.job["variables"],
                 "definitions": self.job["definitions"]}
        threading.Thread(target=self._feed, args=(proc.stdin, json.dumps(shell).encode()), daemon=True).start()
        armed = [True]

        def on_alarm(signum, frame):
            if armed[0]:  # never once clean-up has begun
                raise Deadline()
        signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout_s)  # also interrupts a write to a cell that stopped reading
        try:
            self._serve(proc, req_r, rep_w)
        except Deadline:
            self.status = "timeout"
        except protocol.ProtocolError as exc:
            self.status, self.why = "forfeit", str(exc)
        finally:
            armed[0] = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            proc.kill()
            proc.wait()
            memory = cgroup.hit_memory_limit()
            cgroup.remove()
            for fd in (req_r, rep_w):
                os.close(fd)
        if self.status is None:
            if self.done is not None:
                self.status = "error" if self.done["error"] else "ok"
            elif memory or b"MemoryError" in self.output[-4000:]:
                self.status = "memory"
            else:
                last = self.text().strip().splitlines()[-1:]  # e.g. why the sandbox could not start
                self.status, self.why = "killed", f"it exited with status {proc.returncode} before finishing" + \
                    (f": {last[0][:300]}" if last else "")
        return self

    @staticmethod
    def _feed(pipe, data: bytes):
        try:
            pipe.write(data)
            pipe.close()
        except (BrokenPipeError, OSError):
            pass

    def _serve(self, proc, req_r: int, rep_w: int):
        out_fd, pending, open_fds = proc.stdout.fileno(), b"", {proc.stdout.fileno(), req_r}
        while open_fds:
            ready, _, _ = select.select(list(open_fds), [], [], 0.05)
            if not ready and proc.poll() is not None:
                return  # exited; a descendant may still hold a pipe open, but the sandbox dies with bwrap
            for fd in ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    open_fds.discard(fd)
                elif fd == out_fd:
                    room = protocol.MAX_OUTPUT_CHARS - len(self.output)
                    self.truncated |= len(chunk) > room
                    self.output += chunk[:max(room, 0)]
                else:
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    if len(pending) > protocol.MAX_LINE_BYTES:
                        raise protocol.ProtocolError("a request line without an end")
                    for line in lines:
                        self._handle(protocol.parse_line(line), rep_w)

    def _handle(self, message: dict, rep_w: int):
        if self.done is not None:
            raise protocol.ProtocolError("a message after the cell finished")
        if "done" in message:
            self.done = protocol.check_done(message)
            return
        self.calls += 1
        data = (json.dumps(answer(self.world, message, self.calls)) + "\n").encode()
        while data:
            data = data[os.write(rep_w, data):]

    def text(self) -> str:
        text = self.output.decode("utf-8", "replace")
        return text + "\n... [output cut]" if self.truncated else text


def run_execute(job: dict, task) -> dict:
    db = base64.b64decode(job["db"])
    conn = load(db)
    conn.execute(f"PRAGMA max_page_count = {protocol.MAX_DB_BYTES // conn.execute('PRAGMA page_size').fetchone()[0]}")
    deadline = time.monotonic() + job["timeout_s"]
    conn.set_progress_handler(lambda: int(time.monotonic() > deadline), PROGRESS_OPS)
    cell = CellRun(registry.World(conn), job).run()
    kept = cell.status in ("ok", "error")
    if kept:
        conn.set_progress_handler(None, 0)
        db = conn.serialize()
    completed, evaluation = judge(task, db, time.monotonic() + job["eval_timeout_s"])
    if cell.status == "forfeit":
        completed, evaluation = True, rejected(task, f"forfeit: the cell broke the protocol ({cell.why})")
    return {"status": cell.status, "output": cell.text(), "error": cell.done["error"] if kept else cell.why,
            "db": base64.b64encode(db).decode() if kept else None,
            "variables": cell.done["variables"] if kept else None,
            "definitions": cell.done["definitions"] if kept else None,
            "completed": completed, "evaluation": evaluation}


def run_evaluate(job: dict, task) -> dict:
    completed, evaluation = judge(task, base64.b64decode(job["db"]), time.monotonic() + job["eval_timeout_s"])
    return {"status": "ok", "output": "", "error": None, "db": None, "variables": None, "definitions": None,
            "completed": completed, "evaluation": evaluation}


def main():
    job = json.loads(sys.stdin.buffer.read())
    # the cell's limits are set below these (an unprivileged process cannot raise its hard limits again)
    seconds = job.get("timeout_s", 0) + job["eval_timeout_s"]
    jail.set_rlimits(max(HOST_MEMORY_MB, job.get("memory_mb", 0)), int(seconds) + 60)
    task = load_task(job["task_id"])
    reply = (run_execute if job["op"] == "execute" else run_evaluate)(job, task)
    sys.stdout.write(json.dumps(reply))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
