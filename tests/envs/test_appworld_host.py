"""The world host's judging (envs/appworld/lite/host.py): a schema check against the seed before any check runs,
and a deadline on every query, so no world can hang or fool an evaluation."""
import sqlite3
import time

import pytest

from envs.appworld.lite.host import connect_until, judge
from envs.appworld.lite.tasks import load_task

TASK = "notes_tag_count_1"
ENDLESS = ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT 0 AS completed, NULL AS answer, "
           "NULL AS status FROM r WHERE n = 0")


def world(*sql) -> bytes:
    conn = sqlite3.connect(":memory:")
    conn.deserialize(load_task(TASK).db)
    for statement in sql:
        conn.executescript(statement)
    return conn.serialize()


def test_the_seed_is_judged_by_the_tasks_checks():
    task = load_task(TASK)
    completed, evaluation = judge(task, task.db, time.monotonic() + 5)
    assert not completed and evaluation["num_tests"] == len(task.checks) and not evaluation["success"]
    assert evaluation["pass_count"] == len(evaluation["passes"]) > 0  # nothing changed: collateral checks pass


@pytest.mark.parametrize("change", [
    f"DROP TABLE task_status; CREATE VIEW task_status AS {ENDLESS};",
    "CREATE TRIGGER keep_done AFTER UPDATE ON notes BEGIN UPDATE task_status SET completed = 1; END;",
    "CREATE TABLE extra (x);",
    "CREATE INDEX notes_by_title ON notes (title);",
])
def test_a_world_whose_schema_differs_from_the_seeds_fails_every_check(change):
    task = load_task(TASK)
    start = time.monotonic()
    completed, evaluation = judge(task, world(change), time.monotonic() + 5)
    assert time.monotonic() - start < 2
    assert completed and evaluation["pass_count"] == 0 and not evaluation["success"]
    assert evaluation["failures"] == ["the world's schema differs from the seed's"]


def test_bookkeeping_must_hold_exactly_one_row():
    task = load_task(TASK)
    _, evaluation = judge(task, world("INSERT INTO task_status VALUES (1, '\"x\"', 'success');"),
                          time.monotonic() + 5)
    assert evaluation["pass_count"] == 0 and "exactly one row" in evaluation["failures"][0]


def test_every_query_stops_at_the_deadline():
    conn = connect_until(time.monotonic() + 0.3)(world(f"CREATE VIEW endless AS {ENDLESS};"))
    start = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="interrupted"):
        conn.execute("SELECT * FROM endless").fetchall()
    assert time.monotonic() - start < 2
    task = load_task(TASK)
    _, evaluation = judge(task, task.db, time.monotonic() - 1)
    assert evaluation["failures"] == ["evaluation ran out of time"] and evaluation["pass_count"] == 0
