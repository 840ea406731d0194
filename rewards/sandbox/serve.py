"""The program side of a tested run, inside the program's sandbox: run main.py (in its working directory) as
__main__, then answer the harness's requests over fds 3 (requests in) and 4 (replies out) until it hangs up.

Nothing here is trusted: the program may rewrite this process at will. That costs nothing, because the harness
lives in another sandbox and only ever receives encoded values from here (wire.py), never objects or code.
"""
import builtins
import operator
import os
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wire  # noqa: E402

del sys.path[0]
APPLY = {name: getattr(builtins, name) for name in ("repr", "str", "len", "hash", "bool", "int", "float", "list",
                                                     "abs", "round", "divmod", "format", "sorted")}
APPLY.update({name: getattr(operator, name) for name in (
    "index", "contains", "getitem", "setitem", "delitem", "eq", "ne", "lt", "le", "gt", "ge", "add", "sub", "mul",
    "truediv", "floordiv", "mod", "pow", "neg", "pos", "invert", "and_", "or_", "xor", "lshift", "rshift", "matmul")})


def serve(requests, replies, namespace: dict):
    handles, ids = [], {}

    def as_handle(value):
        if id(value) not in ids:
            ids[id(value)] = len(handles)
            handles.append(value)  # kept alive, so the id stays this object's
        return {"h": ids[id(value)]}

    def from_handle(i):
        return handles[i]

    def answer(message):
        op = message.get("op")
        args = wire.decode(message.get("a", {"l": []}), from_handle)
        if op == "globals":
            return {k: v for k, v in namespace.items() if not (k.startswith("__") and k.endswith("__"))}
        if op == "getattr":
            return getattr(*args)
        if op == "setattr":
            return setattr(*args)
        if op == "call":
            fn, positional, keywords = args
            return fn(*positional, **keywords)
        if op in APPLY:
            return APPLY[op](*args)
        raise ValueError(f"unknown request {op!r}")

    while True:
        line = requests.readline()
        if not line:
            return
        try:
            reply = {"ok": wire.encode(answer(wire.json.loads(line)), as_handle)}
        except Exception as exc:  # the program's own exception: the harness re-raises it in the test
            reply = {"exc": [type(exc).__name__, str(exc)[:2000]]}
        wire.send(replies, reply)


def main():
    requests, replies = os.fdopen(3, "r"), os.fdopen(4, "w")
    with open("main.py") as f:
        code = compile(f.read(), "main.py", "exec")
    module = types.ModuleType("__main__")
    module.__file__ = "main.py"
    sys.modules["__main__"] = module
    sys.argv = ["main.py"]
    exec(code, module.__dict__)
    sys.stdout.flush()
    serve(requests, replies, module.__dict__)


if __name__ == "__main__":
    main()
