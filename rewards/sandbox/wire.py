"""The value encoding between the test harness and the program under test (both sides import this file).

Values cross as JSON: None, bool, int, float and str as themselves, containers tagged ({"l": [...]} a list,
{"t"} tuple, {"s"} set, {"f"} frozenset, {"d": [[k, v], ...]} dict, {"b"} base64 bytes, {"c": [re, im]} complex),
and anything else the program holds as {"h": id}, a handle that the harness can only use through further requests
(attribute, call, operator). A subclass of a plain type (Counter, OrderedDict, defaultdict, a namedtuple, an
IntEnum, a str subclass) travels as its plain base's value, so that what it is compared with is compared as data
on the harness's side, whatever comparison the subclass defines. The harness decodes what the program sends with
`decode`, which builds nothing but these plain types and handles: a program cannot hand the harness an object with
its own code in it.
"""
import base64
import json

MAX_DEPTH = 64  # deeper values travel as a handle (program side) or are refused (harness side)
# bool before int (a subclass of it), as isinstance would find them; bool itself cannot be subclassed
PLAIN_BASES = (bool, int, float, str, bytes, complex, list, tuple, set, frozenset, dict)


class ProtocolError(Exception):
    """The other side sent something that is not a well-formed message."""


def encode(value, as_handle, depth: int = 0):
    """Plain data as itself or tagged; anything else as as_handle(value) (a dict such as {"h": 3})."""
    kind = type(value)
    if value is None or kind in (bool, str, float):
        return value
    if kind is int:
        return value if abs(value) < 10 ** 4000 else as_handle(value)  # json refuses longer ints (3.11's str limit)
    if depth >= MAX_DEPTH:
        return as_handle(value)
    items = lambda xs: [encode(x, as_handle, depth + 1) for x in xs]  # noqa: E731
    if kind is list:
        return {"l": items(value)}
    if kind is tuple:
        return {"t": items(value)}
    if kind is set:
        return {"s": items(value)}
    if kind is frozenset:
        return {"f": items(value)}
    if kind is dict:
        return {"d": [[encode(k, as_handle, depth + 1), encode(v, as_handle, depth + 1)] for k, v in value.items()]}
    if kind is bytes:
        return {"b": base64.b64encode(value).decode()}
    if kind is complex:
        return {"c": [value.real, value.imag]}
    base = next((b for b in PLAIN_BASES if isinstance(value, b)), None)
    if base is not None:  # a subclass: its base's value (the base's constructor copies it into an exact instance)
        try:
            plain = base(value)
        except Exception:
            return as_handle(value)
        if type(plain) is base:
            return encode(plain, as_handle, depth)
    return as_handle(value)


def decode(data, from_handle, number=None, depth: int = 0):
    """The inverse of encode; from_handle(id) gives what a handle stands for on this side, and `number`, when
    given, what a decoded float or complex becomes (the harness's NaN guard). Refuses anything else."""
    def inner(x):
        return decode(x, from_handle, number, depth + 1)
    if data is None or type(data) in (bool, int, str):
        return data
    if type(data) is float:
        return number(data) if number else data
    if depth >= MAX_DEPTH + 1 or type(data) is not dict or len(data) != 1:
        raise ProtocolError(f"not an encoded value: {str(data)[:80]}")
    (tag, body), = data.items()
    if tag == "h" and type(body) is int:
        return from_handle(body)
    if tag == "b" and type(body) is str:
        return base64.b64decode(body)
    if tag == "c" and type(body) is list and len(body) == 2 and all(type(x) in (int, float) for x in body):
        return number(complex(*body)) if number else complex(*body)
    if type(body) is not list:
        raise ProtocolError(f"bad {tag!r} value")
    if tag == "d":
        if not all(type(pair) is list and len(pair) == 2 for pair in body):
            raise ProtocolError("bad dict value")
        return {inner(k): inner(v) for k, v in body}
    kinds = {"l": list, "t": tuple, "s": set, "f": frozenset}
    if tag not in kinds:
        raise ProtocolError(f"unknown tag {tag!r}")
    return kinds[tag](inner(x) for x in body)


def send(fd_file, message: dict):
    fd_file.write(json.dumps(message, separators=(",", ":")) + "\n")
    fd_file.flush()


def receive(fd_file, max_bytes: int):
    """One message, or raise ProtocolError (end of stream, a line too long, not JSON)."""
    line = fd_file.readline(max_bytes + 1)
    if not line:
        raise ProtocolError("the program closed the channel (it exited or was killed)")
    if len(line) > max_bytes or not line.endswith("\n"):
        raise ProtocolError(f"a reply longer than {max_bytes} bytes")
    try:
        message = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"a reply that is not JSON: {exc}") from None
    if type(message) is not dict:
        raise ProtocolError("a reply that is not an object")
    return message
