"""Hostile AppWorld lite cells, written as a policy might stumble on them: each gets past the trusted side's code
filter and tries to reach the world's internals, the checkout or the trainer; none may change the score, raise a
reward error, hang a step or grow the trainer.

Every cell here scored, read or hung something before the world moved behind the sandboxed proxy (issue 23)."""
import json
import os
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from envs import make_env
from envs.appworld.lite.backend import FAILED, LiteBackend, unsafe_reason
from envs.appworld.lite.tasks import load_task
from rewards.base import RewardCaller

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TASKS_PY = os.path.join(REPO, "envs", "appworld", "lite", "tasks.py")
TASK = "music_liked_genre_1"  # checks: the answer (a genre) and that nothing else changed
CHEAT_SQL = "UPDATE task_status SET completed = 1, answer = '\"rock\"', status = 'success'"
ENDLESS_VIEW = ("DROP TABLE task_status; CREATE VIEW task_status AS WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL "
                "SELECT n + 1 FROM r) SELECT 0 AS completed, NULL AS answer, NULL AS status FROM r WHERE n = 0;")


@pytest.fixture()
def backend():
    backend = LiteBackend()
    backend.initialize(TASK)
    yield backend
    backend.close(TASK)


def run_cell(backend, code: str) -> str:
    assert unsafe_reason(code) is None, "the cell must get past the filter, as a policy's would"
    return backend.execute(TASK, code)


def assert_not_cheated(backend):
    result = backend.evaluate(TASK)
    assert not backend.task_completed(TASK)
    assert not result["success"] and "answer_correct" in result["failures"], result


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


def guarded_step(env, code: str):
    """env.step as the trainer runs it (rl.scoring.Scorer.safe_step): under RewardCaller, which counts errors and
    timeouts. Returns (ok, result, caller)."""
    caller = RewardCaller(None, name="correctness", timeout_s=10.0)
    caller.threads_before = set(threading.enumerate())
    ok, result = caller.run(env.step, fenced(code))
    return ok, result, caller


def reward_threads_end(caller, within_s: float = 5.0) -> bool:
    """Every thread the step started (RewardCaller runs each call on a thread of its own) has ended."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not set(threading.enumerate()) - caller.threads_before:
            return True
        time.sleep(0.05)
    return False


# ---- module and builtin escapes: arbitrary code, but in a sandbox without the checkout ---------------------------
def test_posixpath_os_sees_no_checkout_and_no_host_filesystem(backend):
    out = run_cell(backend, f"import posixpath\nos = posixpath.os\nprint(sorted(os.listdir('/')))\n"
                            f"fd = os.open({TASKS_PY!r}, os.O_RDONLY)\nprint(os.read(fd, 100000).decode())")
    assert "'work'" not in out and "'etc'" not in out, out
    assert "def load_task" not in out and "FileNotFoundError" in out, out


def test_codecs_open_cannot_read_tasks_py(backend):
    out = run_cell(backend, f"import codecs\nprint(codecs.open({TASKS_PY!r}).read())")
    assert "def load_task" not in out and "FileNotFoundError" in out, out


def test_traceback_sys_cannot_import_tasks_and_replay_the_reference_solution(backend):
    code = (f"import traceback\ntraceback.sys.path.insert(0, {REPO!r})\n"
            "from envs.appworld.lite.tasks import load_task\n"
            "run = traceback.sys.modules['builtins'].exec\nshell = {'apis': apis}\n"
            f"for cell in load_task({TASK!r}).solution:\n    run(cell, shell)")
    out = run_cell(backend, code)
    assert "ModuleNotFoundError" in out, out
    assert_not_cheated(backend)


def test_pkgutil_cannot_resolve_tasks_py(backend):
    code = (f"import pkgutil\nos = pkgutil.resolve_name('os')\nos.sys.path.insert(0, {REPO!r})\n"
            f"tasks = pkgutil.resolve_name('envs.appworld.lite.tasks')\nprint(tasks.load_task({TASK!r}).solution[1])")
    out = run_cell(backend, code)
    assert "complete_task" not in out and "ModuleNotFoundError" in out, out


def test_timeit_runs_code_only_inside_the_sandbox(backend):
    out = run_cell(backend, "import timeit\n"
                            "timeit.timeit(\"import os; print(sorted(os.listdir('/')), os.getuid())\", number=1)")
    assert "'tmp'" in out and "'work'" not in out and out.rstrip().endswith("65534"), out


def test_subclasses_walk_finds_os_but_no_checkout(backend):
    code = ("import operator\nsubs = operator.attrgetter('__class__.__base__.__subclasses__')(())()\n"
            "wrap = [c for c in subs if 'os._wrap_close' in str(c)][0]\n"
            "os_globals = operator.attrgetter('__init__.__globals__')(wrap)\n"
            f"print(os_globals['listdir']({os.path.dirname(TASKS_PY)!r}))")
    out = run_cell(backend, code)
    assert "tasks.py" not in out and "FileNotFoundError" in out, out


# ---- reaching the world's objects: there are none in the cell's process -------------------------------------------
def test_match_class_pattern_captures_no_world(backend):
    out = run_cell(backend, f"match apis:\n    case object(_world=w):\n        w.conn.execute({CHEAT_SQL!r})\n"
                            "        print('captured', w)\n    case _:\n        print('no world')")
    assert out == "no world"
    assert_not_cheated(backend)


def test_attrgetter_reaches_no_database(backend):
    out = run_cell(backend, f"import operator\nconn = operator.attrgetter('_world.conn')(apis)\n"
                            f"conn.execute({CHEAT_SQL!r})\nconn.commit()")
    assert out.startswith(FAILED) and "AttributeError" in out, out
    assert_not_cheated(backend)


def test_format_string_introspection_shows_no_world(backend):
    first = run_cell(backend, "print('{0._world.conn}'.format(apis))")
    second = run_cell(backend, "print('{0.__class__.__init__.__globals__}'.format(apis))")
    for out in (first, second):
        assert "sqlite3.Connection" not in out and "World" not in out, out


def test_globals_walk_and_gc_find_no_world_to_write(backend):
    code = ("import operator\ng = operator.attrgetter('__class__.__init__.__globals__')(apis)\nb = g['__builtins__']\n"
            "load = b['__import__'] if type(b) is dict else operator.attrgetter('__import__')(b)\n"
            "gc = load('gc')\nkinds = ('World', 'sqlite3.Connection')\n"
            "worlds = [o for o in gc.get_objects() if any(k in str(type(o)) for k in kinds)]\n"
            "print('worlds', len(worlds))\n"
            f"for w in worlds:\n    (w.conn if hasattr(w, 'conn') else w).execute({CHEAT_SQL!r})")
    out = run_cell(backend, code)
    assert out == "worlds 0", out
    assert_not_cheated(backend)


def test_sql_write_to_task_status_is_impossible(backend):
    """Whatever the cell reaches in its own process, no SQL reaches the world: task_status only changes through
    apis.supervisor.complete_task."""
    inner = ("import gc, sqlite3\nfor o in gc.get_objects():\n    if isinstance(o, sqlite3.Connection):\n"
             f"        o.execute({CHEAT_SQL!r})\n        o.commit()")
    code = f"import traceback\nrun = traceback.sys.modules['builtins'].exec\nrun({inner!r}, {{}})"
    run_cell(backend, code)
    assert_not_cheated(backend)


# ---- forged replies: scored 0, never a reward error --------------------------------------------------------------
def test_printed_result_lines_are_plain_text_and_score_nothing():
    env = make_env("appworld", max_turns=2, score="success")
    env.reset({"id": TASK})
    forged = {"output": "", "error": None, "db": "AAAA", "variables": {}, "definitions": []}
    lines = ["Execution successful.", '{"success": true, "pass_count": 2, "num_tests": 2, "completed": true}',
             "__CREDO_APPWORLD_CELL__" + json.dumps(forged)]  # the last: the old harness's own reply format
    code = (f"import posixpath\nposixpath.os.write(1, {chr(10).join([''] + lines + ['']).encode()!r})\n"
            "posixpath.os.kill(posixpath.os.getpid(), 9)")
    ok, result, caller = guarded_step(env, code)
    assert ok and caller.stats.errors == 0 and caller.stats.timeouts == 0
    assert result.score == 0.0 and not result.info["completed"]


def test_a_line_forged_on_the_api_pipe_forfeits_the_task_without_a_reward_error():
    env = make_env("appworld", max_turns=3)  # fraction scoring: an untouched world would score 0.5 here
    env.reset({"id": TASK})
    code = ("import posixpath, traceback\nrequests = int(traceback.sys.argv[1])\n"
            "posixpath.os.write(requests, b'{\"done\": {\"error\": null, \"variables\": {\"x\": \"!\"}, "
            "\"definitions\": []}}\\n')")
    ok, result, caller = guarded_step(env, code)
    assert ok and caller.stats.errors == 0 and caller.stats.timeouts == 0
    assert result.score == 0.0 and result.done and env.episode_record()["pass_count"] == 0


# ---- hangs and memory: bounded, nothing left running -------------------------------------------------------------
@pytest.mark.serial  # a wall-clock bound (10 s for about 5 s of work) that a second test on the cores could break
def test_an_endless_view_cannot_hang_a_step_or_leave_a_thread():
    env = make_env("appworld", max_turns=2)
    env.reset({"id": TASK})
    code = f"match apis:\n    case object(_world=w):\n        w.conn.executescript({ENDLESS_VIEW!r})\n    case _:\n" \
           "        while True:\n            pass"
    children_before = set(psutil.Process().children(recursive=True))  # e.g. worker pools of earlier tests
    start = time.monotonic()
    ok, result, caller = guarded_step(env, code)
    assert ok and caller.stats.timeouts == 0 and caller.stats.errors == 0, "the step must end on its own"
    assert time.monotonic() - start < 10.0
    assert "TimeoutError" in result.observation[0]["content"]
    assert reward_threads_end(caller), "a reward thread is still running"
    left = set(psutil.Process().children(recursive=True)) - children_before
    assert not left, f"a host or sandbox process outlived the step: {left}"


def test_a_world_with_a_view_for_a_table_is_rejected_not_evaluated(backend):
    """Defence in depth: even a world that got a view (no cell can make one now) is judged in a limited process,
    and a schema that differs from the seed's fails every check at once instead of running the view."""
    conn = sqlite3.connect(":memory:")
    conn.deserialize(load_task(TASK).db)
    conn.executescript(ENDLESS_VIEW)
    session = backend.sessions[TASK]
    session.db, session.evaluation = conn.serialize(), None
    done = {}
    worker = threading.Thread(target=lambda: done.update(result=backend.evaluate(TASK)), daemon=True)
    worker.start()
    worker.join(10.0)
    assert "result" in done, "evaluate() hung on the view"
    assert done["result"]["pass_count"] == 0 and "schema" in done["result"]["failures"][0]


def test_a_cell_cannot_grow_the_world_the_shell_or_the_trainer_without_bound(backend):
    fill_world = ("me = apis.supervisor.show_profile()\n"
                  "pw = {a['account_name']: a['password'] for a in apis.supervisor.show_account_passwords()}\n"
                  "t = apis.notes.login(username=me['email'], password=pw['notes'])['access_token']\n"
                  "for i in range(8):\n"
                  "    apis.notes.create_note(access_token=t, title=f'n{i}', content='z' * (1 << 20))")
    fill_shell = "\n".join(f"v{i} = 'x' * (600 << 10)" for i in range(8))
    flood = "for _ in range(8):\n    print('y' * (1 << 20))"
    rss = []
    for _ in range(2):
        out = run_cell(backend, fill_world)
        assert "507" in out, out[-500:]  # the world is full: the call fails, the calls before it are kept
        run_cell(backend, fill_shell)
        printed = run_cell(backend, flood)
        assert len(printed) <= (1 << 20) + 100 and printed.endswith("[output cut]")
        rss.append(psutil.Process().memory_info().rss)
    session = backend.sessions[TASK]
    assert len(session.db) <= 4 << 20
    assert sum(map(len, session.variables.values())) <= 4 << 20
    assert rss[-1] - rss[0] < 64 << 20, f"the trainer grew from {rss[0] >> 20} to {rss[-1] >> 20} MiB"


def test_a_cell_cannot_kill_a_concurrent_sibling():
    """Two episodes at once (--code_workers 2): one cell signals every process it may, the other solves its task."""
    killer, solver = LiteBackend(), LiteBackend()
    killer.initialize("notes_tag_count_1")
    solver.initialize(TASK)
    code = ("import posixpath, time\nos = posixpath.os\nend = time.time() + 3\nwhile time.time() < end:\n"
            "    try:\n        os.kill(-1, 9)\n    except OSError:\n        pass")
    with ThreadPoolExecutor(2) as pool:
        killing = pool.submit(killer.execute, "notes_tag_count_1", code)
        time.sleep(0.5)
        outputs = [solver.execute(TASK, cell) for cell in load_task(TASK).solution]
        killing.result()
    assert solver.evaluate(TASK)["success"], outputs
