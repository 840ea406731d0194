"""The test side of a tested run, in its own sandbox: the tests run here, in this interpreter, and reach the
program's names only through requests to the program's process (serve.py), whose replies decode to plain values
or handles (wire.py). The job is job.json in its working directory ({"tests", "keep", "token",
"max_reply_bytes"}), visible to no one else; results go out on fd 3 as one line: the run's token, then a JSON list
with None per passing test, else the error.

What a test sees (credo's reading; issues 51 and 62):
- Names: a namespace built here, fresh: the genuine builtins (bound last, so no program name can stand in for
  them), `__name__`, and the program's globals whose name is a plain `str` (`type(name) is str`), an identifier and
  not a dunder (`__builtins__`, `__name__`: the program's process answers the globals request as it likes, a str
  subclass's own `startswith` included, so nothing is filtered on its side), except those named like a builtin
  (`set`, `sorted`, `abs`, `len`, `AssertionError`...) or like a standard-library module (`math`, `re`,
  `collections`...), unless the job's `keep` lists the name (the names the tests are meant to call: HumanEval's
  entry point, the functions of an MBPP row's reference solution, such as mbpp-126's `sum`). A program that
  imported a standard module under its own name (`import math`, as MBPP's test_imports do) leaves the tests the
  harness's own, genuine module of that name. The rule is by name only: whether a global is a module is the
  program's answer, which it could fake. An alias (`import heapq as hq`) is the program's own name, and a test that
  uses one calls the program's object.
- Values: what a call returns decodes to plain data when it is plain data (wire.py; subclasses such as Counter or
  a namedtuple travel as their plain base) and is then compared here, out of the program's reach. Anything else is
  a Remote: an operator between two Remotes is the program's (both objects are its own, as `Point(1, 2) ==
  Point(1, 2)` asks), but a Remote never meets the test's own data in the program: `==` with plain data is False,
  `!=` True, ordering and arithmetic with plain data raise TypeError, `x in remote` is decided here over the
  remote's items. So an always-equal `__eq__` passes nothing, and the program never sees an expected value through
  a comparison.
- Edge forms (issue 62): an exception of the program's that steers iteration (StopIteration, StopAsyncIteration)
  arrives as RemoteError, so `all(map(f, xs))` cannot end early on the program's say; a NaN the program returns
  (a float, or a complex with a NaN part, at any depth of a value) arrives as a ProgramNaN, which raises on every
  comparison (`not abs(f() - 2.5) > 1e-6` fails) and stays one through arithmetic, abs() and round(); math.isnan
  still answers True. A NaN that the test makes itself (float('nan'), float() or a math function of the program's
  value) is ordinary Python: docs/code-sandbox.md says what this covers.
"""
import builtins
import importlib
import json
import operator
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wire  # noqa: E402

del sys.path[0]


class RemoteError(Exception):
    """An exception raised in the program whose type is not a builtin one, or one that would steer the test's own
    iteration (STEERING)."""


STEERING = (StopIteration, StopAsyncIteration)


class NaNCompared(ValueError):
    """A test compared a NaN that the program returned."""


def _no_comparison(self, other):
    raise NaNCompared("the program returned NaN, and a NaN the program returns fails every comparison in a test "
                      "(use math.isnan to test for one)")


def _plain(value):
    return float.__float__(value) if isinstance(value, float) else complex(value.real, value.imag)


def _stays_nan(op, reflected=False):
    """An operator whose NaN result stays a ProgramNaN (abs(f() - 2.5) is one too)."""
    def method(self, *args):
        result = op(*args, _plain(self)) if reflected else op(_plain(self), *args)
        return program_nan(result) if type(result) in (float, complex) else result
    return method


class ProgramNaN(float):
    """A NaN float the program returned (module docstring)."""
    __hash__ = float.__hash__
    real = property(lambda self: self)


class ProgramComplexNaN(complex):
    """A complex with a NaN part that the program returned (module docstring)."""
    __hash__ = complex.__hash__
    real = property(lambda self: program_nan(complex.real.__get__(self)))
    imag = property(lambda self: program_nan(complex.imag.__get__(self)))


for _kind in (ProgramNaN, ProgramComplexNaN):
    for _dunder in ("eq", "ne", "lt", "le", "gt", "ge"):
        setattr(_kind, f"__{_dunder}__", _no_comparison)
    for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow"):
        _op = getattr(operator, _name)
        setattr(_kind, f"__{_name}__", _stays_nan(_op))
        setattr(_kind, f"__r{_name}__", _stays_nan(_op, reflected=True))
    for _name in ("neg", "pos", "abs"):
        setattr(_kind, f"__{_name}__", _stays_nan(getattr(operator, _name)))
ProgramNaN.__round__ = _stays_nan(round)
ProgramComplexNaN.conjugate = _stays_nan(complex.conjugate)


def program_nan(value):
    """A float or a complex from the program, its NaN as a ProgramNaN / ProgramComplexNaN (wire.decode's hook)."""
    if isinstance(value, float) and value != value:
        return value if type(value) is ProgramNaN else ProgramNaN(value)
    if isinstance(value, complex) and (value.real != value.real or value.imag != value.imag):
        return value if type(value) is ProgramComplexNaN else ProgramComplexNaN(value)
    return value


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
            return wire.decode(message["ok"], self.proxy, program_nan)
        exc = message.get("exc")
        if set(message) == {"exc"} and type(exc) is list and len(exc) == 2 and all(type(x) is str for x in exc):
            raise local_exception(*exc)
        raise wire.ProtocolError(f"a malformed reply: {str(message)[:80]}")


def local_exception(name: str, text: str) -> BaseException:
    """The program's exception as the builtin type of that name (so `except ValueError` in a test works), else
    RemoteError. Never a non-Exception type: a program cannot send SystemExit or KeyboardInterrupt here."""
    kind = getattr(builtins, name, None)
    if kind in STEERING:  # as itself it would end the test's loop: `all(map(f, xs))` would pass (module docstring)
        return RemoteError(f"{name} raised by the program: {text}")
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


def _between_remotes(op: str, reflected: bool = False):
    """A binary operator that the program answers only when both operands are its own objects. With the test's data
    on the other side, NotImplemented: Python then falls back to identity for == / != (False / True) and raises
    TypeError for ordering and arithmetic, and the test's value never reaches the program."""
    forward = _forward(op, reflected)

    def method(self, other):
        return forward(self, other) if isinstance(other, Remote) else NotImplemented
    return method


def _contains(self, item):
    """`item in remote`, decided here: the remote's items come back (plain data or handles) and are compared here."""
    channel = object.__getattribute__(self, "_channel")
    return any(x is item or x == item for x in channel.request("list", self))


# Operators on one remote (or with a key or a format of the test's: an index is the test's input, not its answer)
for _dunder, _op in {"repr": "repr", "str": "str", "len": "len", "hash": "hash", "bool": "bool", "int": "int",
                     "float": "float", "index": "index", "getitem": "getitem", "setitem": "setitem",
                     "delitem": "delitem", "neg": "neg", "pos": "pos", "abs": "abs", "invert": "invert",
                     "round": "round", "format": "format"}.items():
    setattr(Remote, f"__{_dunder}__", _forward(_op))
# Comparisons and arithmetic: between two remotes only
for _dunder, _op in {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge", "add": "add",
                     "sub": "sub", "mul": "mul", "truediv": "truediv", "floordiv": "floordiv", "mod": "mod",
                     "pow": "pow", "and": "and_", "or": "or_", "xor": "xor", "lshift": "lshift", "rshift": "rshift",
                     "matmul": "matmul", "divmod": "divmod"}.items():
    setattr(Remote, f"__{_dunder}__", _between_remotes(_op))
for _dunder in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor", "matmul"):
    setattr(Remote, f"__r{_dunder}__", _between_remotes(_dunder + "_" if _dunder in ("and", "or") else _dunder, True))
Remote.__contains__ = _contains


RESERVED = frozenset(dir(builtins)) | frozenset(sys.stdlib_module_names)


def _names(code) -> set:
    """Every global or attribute name a code object uses, its functions' and classes' included."""
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _names(const)
    return names


def test_namespace(program_globals, keep, tests: list) -> dict:
    """The namespace the tests run in (module docstring), built here from nothing: the program's plain-named
    globals less the reserved names not in `keep`; for a reserved name that the program bound and a test uses, the
    genuine standard module of that name (imported here, only when a test names it); then `__name__` and the
    genuine builtins, last, so that nothing of the program's stands in for them."""
    if type(program_globals) is not dict:
        raise wire.ProtocolError(f"the program's globals came back as a {type(program_globals).__name__}")
    namespace, hidden = {}, []
    for name, value in program_globals.items():
        # type(name) is str: no subclass (its own ==, hash or startswith) and no handle reaches the tests' names
        if type(name) is not str or not name.isidentifier() or name.startswith("__"):
            continue
        if name in RESERVED and name not in keep:
            hidden.append(name)
        else:
            namespace[name] = value
    used = set()
    for source in filter(lambda test: isinstance(test, str), tests):
        try:
            used |= _names(compile(source, "<test>", "exec"))
        except (SyntaxError, ValueError):
            pass  # the test fails when it runs
    for name in hidden:
        if name in used and name in sys.stdlib_module_names:
            try:
                namespace[name] = importlib.import_module(name)
            except ImportError:
                pass
    namespace.update({"__name__": "__main__", "__builtins__": builtins})
    return namespace


def run_tests(channel: Channel, tests: list, keep=()) -> list:
    outcomes = []
    try:
        namespace = test_namespace(channel.request("globals"), frozenset(keep), tests)
    except BaseException as exc:
        return [f"the program never reached the tests ({type(exc).__name__}: {exc})"] * len(tests)
    for test in tests:
        if isinstance(test, dict):
            outcomes.append(run_call(namespace, test))
            continue
        try:
            exec(compile(test, "<test>", "exec"), namespace)
            outcomes.append(None)
        except BaseException as exc:  # a test failing in any way (SystemExit in a test too) is a failed test
            outcomes.append(f"{type(exc).__name__}: {exc}")
    return outcomes


def run_call(namespace: dict, test: dict):
    """A call test ({"call", "args", "returns"}; rewards/code_cases.py): None if it returns the value, else
    "wrong answer: ..." or "runtime error: ...". As LiveCodeBench's grade_call_based: the method of a fresh
    Solution() when the program has that class, else the function; a tuple counts as a list. The comparison is
    here: a returned Remote equals no plain value."""
    try:
        solution = namespace.get("Solution")
        function = getattr(solution(), test["call"]) if solution is not None else namespace[test["call"]]
        got = function(*test["args"])
    except BaseException as exc:
        return f"runtime error: {type(exc).__name__}: {str(exc)[:300]}"
    if type(got) is tuple:
        got = list(got)
    try:
        if got == test["returns"]:
            return None
    except Exception:  # not equal: a NaN of the program's (NaNCompared) equals nothing, an expected NaN included
        pass
    try:
        shown = repr(got)
    except BaseException as exc:  # a Remote's repr is a request, which can fail
        shown = f"an object whose repr failed ({type(exc).__name__})"
    return f"wrong answer: returned {shown[:300]}"


def main():
    with open("job.json") as f:
        job = json.load(f)
    results = os.fdopen(3, "w")
    channel = Channel(os.fdopen(5, "w"), os.fdopen(4, "r"), job["max_reply_bytes"])
    outcomes = run_tests(channel, job["tests"], job.get("keep", ()))
    results.write(job["token"] + json.dumps(outcomes) + "\n")
    results.flush()


if __name__ == "__main__":
    main()
