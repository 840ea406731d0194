"""The program a cell runs in, inside the sandbox (jail.py): the user's shell state, the cell, and `apis` as a proxy.

Never imported by the trusted side: host.py passes this file's text to a sandboxed interpreter (`python -I -S -c`)
with two pipe descriptors on its command line. Stdlib only, and nothing of the world here: `apis.<app>.<api>(**kw)`
writes {"call": [app, api, kw]} as one JSON line to the request pipe and reads {"ok": value} or {"error": [status,
message]} back; the database, the apps' code and the checks stay in the host process. When the cell ends, the
shell's new state goes back as {"done": {"error", "variables", "definitions"}}. What the cell prints goes straight to
its stdout, which the host reads as plain text and never parses.

The cell runs in this very process, so it can reach everything here (the pipes included): nothing in this file is a
boundary. The host validates every line it reads, and a line that breaks the protocol forfeits the task.
"""
import ast
import base64
import json
import os
import pickle
import sys
import traceback
import types

MAX_VARIABLE_BYTES = 1 << 20   # a variable whose pickle is larger is not kept
MAX_VARIABLES_BYTES = 4 << 20  # nor are variables past this total (protocol.py checks the same bounds)
MAX_DEFINITIONS_BYTES = 1 << 20  # imports, functions and classes replayed in later cells
MAX_ERROR_CHARS = 1 << 16


class ApiError(Exception):
    """What a failed API call raises in the model's code: the status code and a JSON message, as a web API would."""

    def __init__(self, status: int, message: str):
        super().__init__(f"Response status code is {status}:\n{json.dumps({'message': message})}")
        self.status = status


class Channel:
    def __init__(self, request_fd: int, reply_fd: int):
        self.out = os.fdopen(request_fd, "w", encoding="utf-8")
        self.replies = os.fdopen(reply_fd, "r", encoding="utf-8")

    def send(self, message: dict):
        self.out.write(json.dumps(message) + "\n")
        self.out.flush()

    def ask(self, message: dict) -> dict:
        self.send(message)
        line = self.replies.readline()
        if not line:
            raise ApiError(503, "the world stopped answering")
        return json.loads(line)


class App:
    def __init__(self, channel, name):
        self.channel, self.name = channel, name

    def __getattr__(self, api_name):
        channel, app_name = self.channel, self.name

        def call(*args, **kwargs):
            if args:
                raise ApiError(422, "pass API arguments by keyword, e.g. apis.music.login(username=..., password=...)")
            try:
                json.dumps(kwargs, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise ApiError(422, f"API arguments must be JSON data (str, int, float, bool, None, list, dict): {exc}")
            reply = channel.ask({"call": [app_name, api_name, kwargs]})
            if "error" in reply:
                raise ApiError(*reply["error"])
            return reply["ok"]
        call.__name__ = api_name
        return call


class Apis:
    """`apis` in the model's code: apis.<app>.<api>(**kwargs), each call a message to the host."""

    def __init__(self, channel, app_names):
        self.channel, self.app_names = channel, tuple(app_names)

    def __getattr__(self, name):
        if name.startswith("_") or name not in self.app_names:
            raise AttributeError(f"there is no app named {name!r}; see apis.api_docs.show_app_descriptions()")
        return App(self.channel, name)


def cell_error(exc, source):
    if isinstance(exc, SyntaxError):
        return f"  line {exc.lineno}\n    {(exc.text or '').strip()}\nSyntaxError: {exc.msg}"
    lines, out = source.splitlines(), []
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == "<cell>":
            text = lines[frame.lineno - 1].strip() if 0 < frame.lineno <= len(lines) else ""
            out.append(f'  File "<cell>", line {frame.lineno}, in {frame.name}\n    {text}')
    return "\n".join(out + [f"{type(exc).__name__}: {exc}"])


def kept_variables(ns: dict) -> dict:
    variables, total = {}, 0
    for name, value in list(ns.items()):
        if name.startswith("__") or name == "apis" or not isinstance(name, str) or not name.isidentifier():
            continue
        try:
            blob = base64.b64encode(pickle.dumps(value)).decode()
        except BaseException:
            continue
        if len(blob) <= MAX_VARIABLE_BYTES and total + len(blob) <= MAX_VARIABLES_BYTES:
            variables[name], total = blob, total + len(blob)
    return variables


def kept_definitions(definitions: list) -> list:
    kept, total = [], 0
    for src in dict.fromkeys(definitions):
        if total + len(src) <= MAX_DEFINITIONS_BYTES:
            kept, total = kept + [src], total + len(src)
    return kept


def run(job: dict, channel: Channel) -> dict:
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    ns = main.__dict__
    ns["apis"] = Apis(channel, job["apps"])
    for src in job["definitions"]:
        try:
            exec(compile(src, "<definitions>", "exec"), ns)
        except BaseException:
            pass
    for name, blob in job["variables"].items():
        try:
            ns[name] = pickle.loads(base64.b64decode(blob))
        except BaseException:
            pass
    error, definitions = None, list(job["definitions"])
    try:
        tree = ast.parse(job["code"], "<cell>")
        definitions += [ast.unparse(n) for n in tree.body if isinstance(n, (
            ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        exec(compile(tree, "<cell>", "exec"), ns)
    except BaseException as exc:
        error = cell_error(exc, job["code"])[:MAX_ERROR_CHARS]
    sys.stdout.flush()
    return {"error": error, "variables": kept_variables(ns), "definitions": kept_definitions(definitions)}


if __name__ == "__main__":
    _channel = Channel(int(sys.argv[1]), int(sys.argv[2]))
    _job = json.loads(sys.stdin.read())
    _channel.send({"done": run(_job, _channel)})
    sys.stdout.flush()
    os._exit(0)
