"""The test side of a tested run, in its own sandbox: the tests run here, in this interpreter, and reach the
program's names only through requests to the program's process (serve.py), whose replies decode to plain values
or handles (wire.py). The job is job.json in its working directory ({"tests", "token", "max_reply_bytes"}), visible
to no one else; results go out on fd 3 as one line: the run's token, then a JSON list with None per passing test,
else the error.
"""
import builtins
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wire  # noqa: E402

del sys.path[0]


class RemoteError(Exception):
    """An exception raised in the program whose type is not a builtin one."""


class Channel:
    def __init__(self, requests, replies, max_reply_bytes: int):
        self.requests, self.replies, self.max_reply_bytes = requests, replies, max_reply_bytes
        self.proxies = {}

    def proxy(self, handle: int):
        if handle not in self.proxies:
            self.proxies[handle] = Remote(self, handle)
        return self.proxies[handle]

    @staticmethod
    def arg(value):
        def as_handle(v):
            if isinstance(v, Remote):
                return {"h": object.__getattribute__(v, "_handle")}
            raise TypeError(f"a test cannot pass a {type(v).__name__} to the program (only plain data and its own "
                            "objects travel)")
        return wire.encode(value, as_handle)

    def request(self, op: str, *args):
        wire.send(self.requests, {"op": op, "a": {"l": [self.arg(a) for a in args]}})
        message = wire.receive(self.replies, self.max_reply_bytes)
        if set(message) == {"ok"}:
            return wire.decode(message["ok"], self.proxy)
        exc = message.get("exc")
        if set(message) == {"exc"} and type(exc) is list and len(exc) == 2 and all(type(x) is str for x in exc):
            raise local_exception(*exc)
        raise wire.ProtocolError(f"a malformed reply: {str(message)[:80]}")


def local_exception(name: str, text: str) -> BaseException:
    """The program's exception as the builtin type of that name (so `except ValueError` in a test works), else
    RemoteError. Never a non-Exception type: a program cannot send SystemExit or KeyboardInterrupt here."""
    kind = getattr(builtins, name, None)
    if isinstance(kind, type) and issubclass(kind, Exception):
        try:
            return kind(text)
        except Exception:  # types with fixed signatures (UnicodeDecodeError)
            pass
    return RemoteError(f"{name}: {text}")


class Remote:
    """Stands for an object in the program: every use is a request."""
    __slots__ = ("_channel", "_handle")

    def __init__(self, channel: Channel, handle: int):
        object.__setattr__(self, "_channel", channel)
        object.__setattr__(self, "_handle", handle)

    def __getattr__(self, name):
        return object.__getattribute__(self, "_channel").request("getattr", self, name)

    def __setattr__(self, name, value):
        object.__getattribute__(self, "_channel").request("setattr", self, name, value)

    def __call__(self, *args, **kwargs):
        return object.__getattribute__(self, "_channel").request("call", self, list(args), kwargs)

    def __iter__(self):
        return iter(object.__getattribute__(self, "_channel").request("list", self))


def _forward(op: str, reflected: bool = False):
    def method(self, *args):
        channel = object.__getattribute__(self, "_channel")
        return channel.request(op, *(tuple(args) + (self,) if reflected else (self,) + tuple(args)))
    return method


for _dunder, _op in {"repr": "repr", "str": "str", "len": "len", "hash": "hash", "bool": "bool", "int": "int",
                     "float": "float", "index": "index", "contains": "contains", "getitem": "getitem",
                     "setitem": "setitem", "delitem": "delitem", "eq": "eq", "ne": "ne", "lt": "lt", "le": "le",
                     "gt": "gt", "ge": "ge", "add": "add", "sub": "sub", "mul": "mul", "truediv": "truediv",
                     "floordiv": "floordiv", "mod": "mod", "pow": "pow", "neg": "neg", "pos": "pos", "abs": "abs",
                     "invert": "invert", "and": "and_", "or": "or_", "xor": "xor", "lshift": "lshift",
                     "rshift": "rshift", "matmul": "matmul", "round": "round", "divmod": "divmod",
                     "format": "format"}.items():
    setattr(Remote, f"__{_dunder}__", _forward(_op))
for _dunder in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor", "matmul"):
    setattr(Remote, f"__r{_dunder}__", _forward(_dunder + "_" if _dunder in ("and", "or") else _dunder, True))


def run_tests(channel: Channel, tests: list) -> list:
    outcomes = []
    try:
        namespace = {"__name__": "__main__", "__builtins__": builtins, **channel.request("globals")}
    except BaseException as exc:
        return [f"the program never reached the tests ({type(exc).__name__}: {exc})"] * len(tests)
    for source in tests:
        try:
            exec(compile(source, "<test>", "exec"), namespace)
            outcomes.append(None)
        except BaseException as exc:  # a test failing in any way (SystemExit in a test too) is a failed test
            outcomes.append(f"{type(exc).__name__}: {exc}")
    return outcomes


def main():
    with open("job.json") as f:
        job = json.load(f)
    results = os.fdopen(3, "w")
    channel = Channel(os.fdopen(5, "w"), os.fdopen(4, "r"), job["max_reply_bytes"])
    outcomes = run_tests(channel, job["tests"])
    results.write(job["token"] + json.dumps(outcomes) + "\n")
    results.flush()


if __name__ == "__main__":
    main()
