"""API arguments that JSON carries but the world cannot store (envs/appworld/lite/registry.py's _check): the cell gets
an HTTP-style error like any other validation error, and the world host keeps serving. An int past SQLite's 64 bits
crashed the host (issue 51: the cell's earlier effects were dropped and no reward error was counted)."""
import math
import re

import pytest

from envs.appworld.lite import apps, registry
from envs.appworld.lite.backend import LiteBackend
from envs.appworld.lite.host import Deadline, answer
from envs.appworld.lite.tasks import load_task
from envs.appworld.lite.world import load

TASK = "music_liked_genre_1"
# what a hostile or careless cell can put in a JSON call: out-of-range and boundary ints, extreme floats, lone
# surrogates (JSON's "\ud800" escape), NUL, long text, wrong shapes and nesting
HOSTILE = [2 ** 63, -2 ** 63 - 1, 2 ** 63 - 1, -2 ** 63, 10 ** 40, -10 ** 40, 1e308, -1e308, math.inf, -math.inf, 0.5,
           True, None, "", " ", "\x00", "\ud800", "a\udfffb", "x" * 70000, [], ["\ud800"], [2 ** 64], ["ok", 1],
           {"k": 2 ** 64}, {"\ud800": 1}, [[[]]]]
VALID = {"string": "a", "integer": 1, "number": 1.0, "boolean": True, "list[string]": ["a"], "any": "a"}


def login(world, app_name: str) -> str:
    password = world.one("SELECT password FROM accounts WHERE app = ? AND email = ?", app_name, world.supervisor)[0]
    return world.call(app_name, "login", {"username": world.supervisor, "password": password})["access_token"]


def test_every_api_answers_every_hostile_argument_with_an_api_error_not_a_crash():
    """Each parameter of each API in turn gets each hostile value (the others valid, the token real), through
    host.answer as the host runs it: the reply is a value or a 4xx error, never an exception and never a 500."""
    world = registry.World(load(load_task(TASK).db))
    tokens = {name: login(world, name) for name, a in apps.APPS.items() if "login" in a["apis"]}
    answered = 0
    for app_name, app in apps.APPS.items():
        for api_name, spec in app["apis"].items():
            valid = {name: VALID[kind] for name, kind, *_ in spec["params"]}
            if spec["auth"]:
                valid["access_token"] = tokens[app_name]
            for name, *_ in spec["params"]:
                for bad in HOSTILE:
                    reply = answer(world, {"call": [app_name, api_name, {**valid, name: bad}]}, calls=1)
                    where = f"{app_name}.{api_name}({name}={bad!r:.40})"
                    assert set(reply) in ({"ok"}, {"error"}), where
                    assert "ok" in reply or 400 <= reply["error"][0] < 500, (where, reply)
                    answered += 1
    assert answered > 2000  # every API was reached


@pytest.mark.parametrize("name, bad, why", [
    ("note_id", 2 ** 63, "from -2**63 to 2**63-1"), ("note_id", -2 ** 63 - 1, "from -2**63 to 2**63-1"),
    ("title", "\ud800", "valid Unicode text"), ("tags", ["ok", "b\udfff"], "valid Unicode text"),
])
def test_what_sqlite_cannot_store_is_a_422_naming_the_parameter(name, bad, why):
    world = registry.World(load(load_task(TASK).db))
    kwargs = {"access_token": login(world, "notes"), "note_id": 1, "title": "t", name: bad}
    with pytest.raises(registry.ApiError, match=f"parameter '{name}' must be .*{re.escape(why)}") as raised:
        world.call("notes", "update_note", kwargs)
    assert raised.value.status == 422


def test_a_cell_passing_a_huge_integer_gets_a_422_and_keeps_its_effects():
    backend = LiteBackend()
    backend.initialize(TASK)
    code = ("me = apis.supervisor.show_profile()\n"
            "pw = {a['account_name']: a['password'] for a in apis.supervisor.show_account_passwords()}\n"
            "t = apis.notes.login(username=me['email'], password=pw['notes'])['access_token']\n"
            "apis.notes.create_note(access_token=t, title='before the bad call')\n"
            "for bad in (2 ** 64, -2 ** 70, 10 ** 30):\n"
            "    try:\n"
            "        apis.notes.show_note(access_token=t, note_id=bad)\n"
            "    except Exception as exc:\n"
            "        print(str(exc).splitlines()[0])\n"
            "apis.notes.create_note(access_token=t, title='after the bad call')")
    out = backend.execute(TASK, code)
    assert out.splitlines() == ["Response status code is 422:"] * 3, out
    titles = {row[0] for row in load(backend.sessions[TASK].db).execute("SELECT title FROM notes")}
    assert {"before the bad call", "after the bad call"} <= titles  # the host served on; the cell's effects kept
    backend.close(TASK)


def test_a_failure_inside_the_world_is_a_500_the_cell_sees_and_a_deadline_stays_a_timeout():
    """The backstop behind _check: whatever else a handler raises is answered (500), not a crashed host; a query
    cut off by the cell's deadline (the progress handler) ends the cell as a timeout, not as a 500."""
    world = registry.World(load(load_task(TASK).db))
    world.conn.close()  # any query now raises sqlite3.ProgrammingError
    reply = answer(world, {"call": ["supervisor", "show_profile", {}]}, calls=1)
    assert reply["error"][0] == 500 and "ProgrammingError" in reply["error"][1], reply
    world = registry.World(load(load_task(TASK).db))
    world.conn.set_progress_handler(lambda: 1, 1)  # past the deadline
    with pytest.raises(Deadline):
        answer(world, {"call": ["supervisor", "show_profile", {}]}, calls=1)
