"""What may cross each boundary of a lite AppWorld cell, checked before anything is used.

Two channels: the sandboxed cell -> the world host (cell.py's JSON lines: API calls, then the shell's new state),
and the world host -> the trainer (one JSON reply per run). Each message is checked for shape, types and size by
a pure function here; anything else raises ProtocolError. On the cell's channel a ProtocolError means the cell
wrote to the pipe itself (cell.py never sends a malformed line), so the host forfeits the task rather than guess.
"""
import base64
import binascii
import json

MAX_LINE_BYTES = 8 << 20        # one API call, or the shell's new state (variables + definitions, JSON-escaped)
MAX_VARIABLE_CHARS = 1 << 20    # as cell.py: a pickled variable, base64
MAX_VARIABLES_CHARS = 4 << 20
MAX_DEFINITIONS_CHARS = 1 << 20
MAX_ERROR_CHARS = 1 << 16
MAX_OUTPUT_CHARS = 1 << 20      # what a cell prints, kept; the env shows the model far less (max_output_chars)
MAX_DB_BYTES = 4 << 20          # the world's database (a seed is ~0.1 MiB); a call that would grow it past fails (507)
MAX_REPLY_CHARS = 48 << 20      # all of the above in one host reply, JSON-escaped at worst
STATUSES = ("ok", "error", "timeout", "memory", "killed", "forfeit")
EVALUATION_KEYS = {"success": bool, "pass_count": int, "num_tests": int, "passes": list, "failures": list,
                   "difficulty": int}


class ProtocolError(ValueError):
    pass


def _require(ok: bool, why: str):
    if not ok:
        raise ProtocolError(why)


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON data")  # NaN as an amount would slip past every range check


def parse_line(line: bytes) -> dict:
    """One JSON object from one line of the cell's request pipe."""
    _require(len(line) <= MAX_LINE_BYTES, f"a line of {len(line)} bytes (at most {MAX_LINE_BYTES})")
    try:
        message = json.loads(line, parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ProtocolError(f"not JSON: {exc}") from None
    _require(isinstance(message, dict) and len(message) == 1, "a message is an object with one key")
    return message


def check_call(message: dict) -> tuple:
    """(app, api, kwargs) of {"call": [app, api, kwargs]}."""
    call = message.get("call")
    _require(isinstance(call, list) and len(call) == 3, "call is [app, api, kwargs]")
    app, api, kwargs = call
    _require(isinstance(app, str) and isinstance(api, str) and len(app) + len(api) < 200, "app and api are names")
    _require(isinstance(kwargs, dict) and all(isinstance(k, str) for k in kwargs), "kwargs is an object")
    return app, api, kwargs


def _check_variables(variables) -> dict:
    _require(isinstance(variables, dict), "variables is an object")
    total = 0
    for name, blob in variables.items():
        _require(isinstance(name, str) and name.isidentifier() and not name.startswith("__"), f"variable {name!r}")
        _require(isinstance(blob, str) and len(blob) <= MAX_VARIABLE_CHARS, f"variable {name!r}: too large")
        try:
            base64.b64decode(blob, validate=True)
        except (binascii.Error, ValueError):
            raise ProtocolError(f"variable {name!r} is not base64") from None
        total += len(blob)
    _require(total <= MAX_VARIABLES_CHARS, f"variables of {total} characters (at most {MAX_VARIABLES_CHARS})")
    return variables


def _check_definitions(definitions) -> list:
    _require(isinstance(definitions, list) and all(isinstance(d, str) for d in definitions), "definitions: strings")
    _require(sum(map(len, definitions)) <= MAX_DEFINITIONS_CHARS, "definitions too large")
    return definitions


def check_done(message: dict) -> dict:
    """The shell's new state from {"done": {"error", "variables", "definitions"}}."""
    done = message.get("done")
    _require(isinstance(done, dict) and set(done) == {"error", "variables", "definitions"},
             "done is {error, variables, definitions}")
    _require(done["error"] is None or isinstance(done["error"], str) and len(done["error"]) <= MAX_ERROR_CHARS,
             "error is null or a short string")
    _check_variables(done["variables"])
    _check_definitions(done["definitions"])
    return done


def check_evaluation(evaluation) -> dict:
    _require(isinstance(evaluation, dict) and set(evaluation) == set(EVALUATION_KEYS), "evaluation keys")
    for key, kind in EVALUATION_KEYS.items():
        _require(isinstance(evaluation[key], kind), f"evaluation {key}: {kind.__name__}")
    _require(all(isinstance(n, str) for n in evaluation["passes"] + evaluation["failures"]), "check names")
    _require(len(evaluation["passes"]) == evaluation["pass_count"] <= evaluation["num_tests"], "pass counts")
    _require(evaluation["success"] == (evaluation["pass_count"] == evaluation["num_tests"] and
                                       not evaluation["failures"]), "success is every check passing")
    return evaluation


def check_host_reply(text: str) -> dict:
    """The world host's reply to the trainer: {"status", "output", "error", "db", "variables", "definitions",
    "completed", "evaluation"}; db, variables and definitions are null when the cell's effects were dropped."""
    _require(len(text) <= MAX_REPLY_CHARS, "reply too large")
    try:
        reply = json.loads(text)
    except ValueError as exc:
        raise ProtocolError(f"host reply is not JSON: {exc}") from None
    keys = {"status", "output", "error", "db", "variables", "definitions", "completed", "evaluation"}
    _require(isinstance(reply, dict) and set(reply) == keys, f"host reply keys are {sorted(keys)}")
    _require(reply["status"] in STATUSES, f"status {reply['status']!r}")
    _require(isinstance(reply["output"], str) and len(reply["output"]) <= MAX_OUTPUT_CHARS + 200, "output")
    _require(reply["error"] is None or isinstance(reply["error"], str), "error")
    _require(isinstance(reply["completed"], bool), "completed is a boolean")
    if reply["db"] is not None:
        _require(isinstance(reply["db"], str), "db is base64")
        try:
            reply["db"] = base64.b64decode(reply["db"], validate=True)
        except (binascii.Error, ValueError):
            raise ProtocolError("db is not base64") from None
        _require(len(reply["db"]) <= MAX_DB_BYTES, "db too large")
    if reply["variables"] is not None or reply["definitions"] is not None:
        _check_variables(reply["variables"])
        _check_definitions(reply["definitions"])
    check_evaluation(reply["evaluation"])
    return reply
