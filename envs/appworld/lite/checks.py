"""What a lite task's checks see and the helpers they are written with (tasks.py's scenarios use them).

A check is a function of a Ctx returning a bool. It is trusted code: tasks.evaluate runs it in the world host
(host.py), on a database the host has checked against the seed's schema first.
"""
from dataclasses import dataclass

from envs.appworld.lite.world import WORLD_TABLES, rows


@dataclass
class Ctx:
    """What a check sees: the world before and after, the answer given to complete_task, the supervisor's email."""
    before: object
    after: object
    answer: object
    me: str


def answer_is(expected):
    def check(c):
        if isinstance(expected, (int, float)):
            try:
                return abs(float(str(c.answer).replace("$", "").replace(",", "")) - expected) < 0.01
            except ValueError:
                return False
        return str(c.answer).strip().casefold() == str(expected).strip().casefold()
    return check


def unchanged_except(*tables):
    return lambda c: all(rows(c.before, t) == rows(c.after, t) for t in WORLD_TABLES if t not in tables)


def new_rows(c, table: str) -> list:
    old = set(c.before.execute(f"SELECT * FROM {table}").fetchall())
    return [r for r in c.after.execute(f"SELECT * FROM {table}").fetchall() if r not in old]


def kept_rows(c, table: str, where: str = "1", *args) -> bool:
    """Every row of `table` matching `where` before is still there, unchanged."""
    after = set(c.after.execute(f"SELECT * FROM {table}").fetchall())
    return all(r in after for r in c.before.execute(f"SELECT * FROM {table} WHERE {where}", args).fetchall())


def close(a, b) -> bool:
    return abs(a - b) < 0.005


def q(conn, sql, *args):
    return conn.execute(sql, args).fetchall()
