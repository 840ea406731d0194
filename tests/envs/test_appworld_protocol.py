"""What may cross the lite AppWorld cell's channels (envs/appworld/lite/protocol.py): every malformed message is
refused with ProtocolError before anything uses it."""
import base64
import json

import pytest

from envs.appworld.lite.protocol import (
    MAX_LINE_BYTES,
    MAX_VARIABLES_CHARS,
    ProtocolError,
    check_call,
    check_done,
    check_host_reply,
    parse_line,
)

EVALUATION = {"success": False, "pass_count": 1, "num_tests": 2, "passes": ["a"], "failures": ["b"], "difficulty": 1}


def reply(**changes) -> str:
    base = {"status": "ok", "output": "hi", "error": None, "db": base64.b64encode(b"db").decode(), "variables": {},
            "definitions": [], "completed": False, "evaluation": EVALUATION}
    return json.dumps({**base, **changes})


def test_a_line_must_be_one_json_object_with_one_key():
    assert parse_line(b'{"call": ["music", "show_song", {"song_id": 1}]}') == {"call": ["music", "show_song",
                                                                                    {"song_id": 1}]}
    for bad in (b"not json", b"[1, 2]", b'{"call": 1, "done": 2}', b"\xff\xfe", b"[" * 100000,
                b'{"call": ["wallet", "send_money", {"receiver_email": "a@b", "amount": NaN}]}'):
        with pytest.raises(ProtocolError):
            parse_line(bad)
    with pytest.raises(ProtocolError, match="at most"):
        parse_line(b" " * (MAX_LINE_BYTES + 1))


def test_a_call_is_an_app_an_api_and_keyword_arguments():
    assert check_call({"call": ["notes", "show_note", {"note_id": 3}]}) == ("notes", "show_note", {"note_id": 3})
    for bad in ({"call": ["notes", "show_note"]}, {"call": ["notes", 1, {}]}, {"call": ["notes", "x", [1]]},
                {"call": "notes.show_note"}, {"done": {}}):
        with pytest.raises(ProtocolError):
            check_call(bad)


def test_the_shell_state_is_bounded_and_well_formed():
    ok = {"done": {"error": None, "variables": {"x": base64.b64encode(b"1").decode()}, "definitions": ["import json"]}}
    assert check_done(ok) == ok["done"]
    big = "A" * (MAX_VARIABLES_CHARS // 4 + 4)
    for variables in ({"x": "not base64!"}, {"__builtins__": "AAAA"}, {"1x": "AAAA"}, {"x": 1},
                      {f"v{i}": big for i in range(5)}):
        with pytest.raises(ProtocolError):
            check_done({"done": {**ok["done"], "variables": variables}})
    for change in ({"definitions": [1]}, {"error": 3}, {"extra": 1}):
        with pytest.raises(ProtocolError):
            check_done({"done": {**ok["done"], **change}})


def test_the_host_reply_is_checked_before_use():
    assert check_host_reply(reply())["db"] == b"db"
    assert check_host_reply(reply(db=None, variables=None, definitions=None))["db"] is None
    bad_evaluations = [{**EVALUATION, "success": True}, {**EVALUATION, "pass_count": 2},
                       {k: v for k, v in EVALUATION.items() if k != "difficulty"}, {**EVALUATION, "passes": [1]}]
    for bad in ([reply(status="great")], [reply(db="@@@")], [reply(completed="yes")], ["{"], ["[]"],
                [reply(evaluation=e) for e in bad_evaluations]):
        for text in bad:
            with pytest.raises(ProtocolError):
                check_host_reply(text)
