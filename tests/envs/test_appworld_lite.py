"""The offline AppWorld stand-in: reference solutions, evaluators, the persistent sandboxed shell, the env."""
from concurrent.futures import ThreadPoolExecutor

import pytest

from envs import env_class, make_env
from envs.appworld.env import NO_CODE
from envs.appworld.lite.backend import FAILED, SUCCESS, LiteBackend
from envs.appworld.lite.tasks import PRELUDE, SPLITS, load_task, task_ids
from envs.appworld.metrics import appworld_metrics


def play(task_id: str, cells) -> dict:
    backend = LiteBackend()
    backend.initialize(task_id)
    outputs = [backend.execute(task_id, cell) for cell in cells]
    return {**backend.evaluate(task_id), "task_id": task_id, "outputs": outputs,
            "completed": backend.task_completed(task_id)}


def fenced(code: str) -> str:
    return f"Let me run this.\n```python\n{code}\n```"


def test_splits_partition_the_scenarios_and_cover_every_difficulty():
    by_split = {s: task_ids(s) for s in SPLITS}
    assert [len(by_split[s]) for s in SPLITS] == [12, 6, 12]
    scenarios = {s: {t.rpartition("_")[0] for t in ids} for s, ids in by_split.items()}
    assert not (scenarios["train"] & scenarios["dev"] or scenarios["train"] & scenarios["test"]
                or scenarios["dev"] & scenarios["test"])
    for split in ("train", "test"):
        assert {load_task(t).difficulty for t in by_split[split]} == {1, 2, 3}
    cls = env_class("appworld")
    assert [r["id"] for r in cls.dataset("eval", 100, 0)] == by_split["test"]
    assert len(cls.dataset("train", 1, 0)) == 1  # the trainer's flag check asks for one row
    # tasks of a scenario are different instances, not copies
    assert len({load_task(t).instruction for t in by_split["train"]}) > 9


def test_every_reference_solution_succeeds_on_every_split():
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda t: play(t, load_task(t).solution), task_ids()))
    for r in results:
        assert r["success"] and r["completed"], (r["task_id"], r["failures"], r["outputs"])
    for split in SPLITS:
        m = appworld_metrics([r for r in results if load_task(r["task_id"]).split == split])
        assert m["appworld/tgc"] == m["appworld/sgc"] == m["appworld/avg_pass_rate"] == 1.0


def test_doing_nothing_fails_every_task():
    for task_id in task_ids():
        r = play(task_id, [])
        assert not r["success"] and not r["completed"] and r["pass_count"] < r["num_tests"], task_id


def test_an_extra_deletion_fails_the_collateral_check():
    task_id = "messages_delete_mentions_1"
    harmful = load_task(task_id).solution[1].replace(
        "apis.supervisor.complete_task()",
        'extra = apis.messages.show_messages(access_token=tokens["messages"], query="dessert")\n'
        'extra = extra or apis.messages.show_messages(access_token=tokens["messages"], query="soon")\n'
        'apis.messages.delete_message(access_token=tokens["messages"], message_id=extra[0]["message_id"])\n'
        'apis.supervisor.complete_task()')
    r = play(task_id, [PRELUDE, harmful])
    assert r["outputs"][1] == SUCCESS
    assert not r["success"]
    assert "matching_messages_deleted" in r["passes"] and "other_messages_kept" in r["failures"]


def test_variables_definitions_and_world_state_persist_across_cells():
    backend = LiteBackend()
    task_id = "notes_tag_count_1"
    backend.initialize(task_id)
    assert backend.execute(task_id, PRELUDE) == SUCCESS
    first = ("import json\ncount = 41\nclass Box:\n    def __init__(self, v):\n        self.v = v\n"
             "box = Box([1, 2])\ndef bump(n):\n    return n + 1\n"
             'made = apis.notes.create_note(access_token=tokens["notes"], title="Persisted", content="kept")')
    assert backend.execute(task_id, first) == SUCCESS
    second = ('note = apis.notes.show_note(access_token=tokens["notes"], note_id=made["note_id"])\n'
              'print(bump(count), box.v, json.dumps(note["content"]), len(all_pages(apis.notes.show_notes, '
              'access_token=tokens["notes"], query="Persisted")))')
    assert backend.execute(task_id, second) == '42 [1, 2] "kept" 1'


def test_a_timeout_or_unsafe_code_fails_and_the_world_keeps_working():
    backend = LiteBackend()
    backend.timeout_s = 1.5
    task_id = "notes_tag_count_2"
    backend.initialize(task_id)
    backend.execute(task_id, PRELUDE + "\nx = 1")
    looping = 'apis.notes.create_note(access_token=tokens["notes"], title="Lost")\nx = 2\nwhile True:\n    pass'
    out = backend.execute(task_id, looping)
    assert out.startswith(FAILED) and "TimeoutError" in out
    for unsafe in ("import os\nos.system('echo hi > /tmp/credo_appworld_probe')",
                   "import subprocess", "open('/etc/passwd').read()", "apis._world.conn",
                   "getattr(apis, '_world')", "().__class__.__bases__[0].__subclasses__()"):
        out = backend.execute(task_id, unsafe)
        assert out.startswith(FAILED) and "not allowed" in out, unsafe
    # the timed-out cell was rolled back (no note, x unchanged); variables and the world still work
    out = backend.execute(task_id, 'print(x, len(apis.notes.show_notes(access_token=tokens["notes"], query="Lost")))')
    assert out == "1 0"


def test_outputs_errors_and_api_conventions():
    backend = LiteBackend()
    task_id = "music_liked_genre_1"
    backend.initialize(task_id)
    assert backend.execute(task_id, "y = 3") == SUCCESS
    assert backend.execute(task_id, "print('hello')") == "hello"
    out = backend.execute(task_id, "print('before')\n1 / 0")
    assert out.startswith("before\n" + FAILED) and "ZeroDivisionError" in out and 'line 2' in out
    assert "SyntaxError" in backend.execute(task_id, "def broken(:")
    assert "401" in backend.execute(task_id, "apis.music.show_liked_songs(access_token='nope')")
    backend.execute(task_id, PRELUDE)
    errors = {"422": ['apis.music.show_liked_songs(access_token=tokens["music"], page_limit=500)',
                      'apis.music.show_song()', 'apis.music.show_song(song_id="1")',
                      'apis.music.show_song(song_id=1, colour="red")', 'apis.music.show_song(1)'],
              "404": ['apis.music.show_song(song_id=999)', 'apis.music.no_such_api()']}
    for code, calls in errors.items():
        for call in calls:
            out = backend.execute(task_id, call)
            assert out.startswith(FAILED) and f"Response status code is {code}" in out, call
    pages = backend.execute(task_id, 'print([len(apis.music.show_liked_songs(access_token=tokens["music"], '
                                     'page_index=i)) for i in range(4)])')
    assert pages == "[5, 5, 4, 0]"  # 14 liked songs, 5 per page by default
    doc = backend.execute(task_id, 'd = apis.api_docs.show_api_doc(app_name="music", api_name="like_song")\n'
                                   'print(sorted(d), [p["name"] for p in d["parameters"]], d["method"])')
    assert doc == ("['api_name', 'app_name', 'description', 'method', 'parameters', 'path', 'response_schemas'] "
                   "['access_token', 'song_id'] POST")
    apps = backend.execute(task_id, 'print([a["name"] for a in apis.api_docs.show_app_descriptions()])')
    assert apps == "['supervisor', 'api_docs', 'music', 'messages', 'wallet', 'notes']"
    # a failed call changes nothing; an error after a successful call keeps that call's effect
    backend.execute(task_id, 'apis.music.like_song(access_token=tokens["music"], song_id=999)')
    backend.execute(task_id, 'p = apis.music.create_playlist(access_token=tokens["music"], title="Kept")\nraise ValueError')
    assert backend.execute(task_id, 'print([q["title"] for q in apis.music.show_playlists(access_token='
                                    'tokens["music"], page_limit=20)][-1])') == "Kept"


def test_env_episode_ends_at_complete_task_with_the_check_fraction():
    env = make_env("appworld", max_turns=4)
    row = env_class("appworld").dataset("train", 100, 0)[0]
    messages = env.reset(row)
    prompt = messages[0]["content"]
    for part in (load_task(row["id"]).instruction, "show_api_doc", "complete_task", "music:", "email "):
        assert part in prompt
    no_code = env.step("I think the answer is 3.")
    assert not no_code.done and no_code.observation[0]["content"].startswith(NO_CODE)
    assert "Reminder of the task:" in no_code.observation[0]["content"]
    assert no_code.score == 0.5  # nothing changed (1 check), no answer yet (0 checks)
    wrong = env.step(fenced(PRELUDE + "\napis.supervisor.complete_task(answer=-1)"))
    assert wrong.done and wrong.observation == [] and wrong.score == 0.5 and wrong.info["completed"]
    assert env.episode_record() == {"task_id": row["id"], "difficulty": 1, "success": False, "pass_count": 1,
                                    "num_tests": 2}

    strict = make_env("appworld", max_turns=1, score="success")
    strict.reset(row)
    right = strict.step(fenced("\n".join(load_task(row["id"]).solution)))
    assert right.done and right.score == 1.0 and right.info["success"]


def test_env_truncates_long_output_and_stops_at_max_turns():
    env = make_env("appworld", max_turns=2)
    env.max_output_chars = 50
    env.reset({"id": "notes_tag_count_3"})
    first = env.step(fenced("print('z' * 500)"))
    text = first.observation[0]["content"]
    assert text.startswith("z" * 50 + "\n... [450 more characters cut]") and not first.done
    assert env.step(fenced("pass")).done
    with pytest.raises(KeyError):
        env.reset({"id": "no_such_scenario_1"})
