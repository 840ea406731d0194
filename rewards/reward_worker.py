"""A reward worker process (started by rewards.worker_pool): loads its reward functions, then answers calls.

Protocol, on private copies of stdin/stdout (the functions' own prints go to stderr, so they cannot corrupt it):
- parent -> worker: length-prefixed pickle frames. The first is {"sys_path", "targets", "parent"}; each later one is
  (target_index, args, kwargs).
- worker -> parent: one JSON line per frame: {"ready": true, "load_errors": {index: message}} after loading, then
  {"value": ...} or {"error": "Type: message"} per call, with "infra": true when the failure was outside the response
  (rewards.base.is_infrastructure, or a function that could not be loaded): the parent retries those once.
Replies are JSON, not pickle, so the trainer never unpickles what a reward function returned: only numbers, None,
and lists / string-keyed dicts of them come back.

Calls run on this process's main thread, so signal-based timeouts inside a function (math-verify's) work.
"""
import json
import numbers
import os
import pickle
import signal
import struct
import sys
import threading
import time
import traceback

from rewards.base import is_infrastructure

PARENT_POLL_S = 1.0


def _exit_when_orphaned(parent_pid: int):
    """End this worker once the trainer is gone, however it went (even SIGKILL). Polling, because Linux's
    PR_SET_PDEATHSIG fires when the *thread* that started the worker exits, and env steps start workers from
    short-lived threads."""
    def watch():
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_S)
        os.killpg(0, signal.SIGKILL)  # this worker leads its own process group: it and what its function started
    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def _read_frame(stream):
    header = stream.read(4)
    if len(header) < 4:
        return None
    (size,) = struct.unpack("<I", header)
    return pickle.loads(stream.read(size))


def _load(target):
    kind, value = target
    if kind == "pickle":
        return pickle.loads(value)
    import importlib
    module_name, _, attr = value.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def to_plain(value):
    """A reward's result as JSON-safe data: numbers become floats; TypeError for anything else."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, numbers.Real):  # bool, int, float, numpy scalars
        return float(value)  # JSON carries NaN / Infinity; the parent refuses them (None is the abstention)
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) or type(value).__name__ in ("ndarray", "Tensor"):
        return [to_plain(v) for v in (value.tolist() if hasattr(value, "tolist") else value)]
    raise TypeError(f"returned a {type(value).__name__} ({value!r:.80}), not a number, None, a dict or a list")


def main():
    protocol_in = os.fdopen(os.dup(0), "rb")
    protocol_out = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # print() in a reward function lands on stderr, next to the trainer's log
    init = _read_frame(protocol_in)
    _exit_when_orphaned(init["parent"])
    sys.path[:] = init["sys_path"]
    functions, load_errors = [], {}
    for i, target in enumerate(init["targets"]):
        try:
            functions.append(_load(target))
        except BaseException as exc:  # reported per function; the parent scores its calls as failures
            functions.append(None)
            load_errors[str(i)] = f"cannot load {target[1] if target[0] == 'import' else 'it'}: " \
                                  f"{type(exc).__name__}: {exc}"

    def reply(obj):
        protocol_out.write(json.dumps(obj) + "\n")
        protocol_out.flush()

    reply({"ready": True, "load_errors": load_errors})
    while (frame := _read_frame(protocol_in)) is not None:
        index, args, kwargs = frame
        try:
            if functions[index] is None:
                raise RuntimeError(load_errors[str(index)])
            reply({"value": to_plain(functions[index](*args, **kwargs))})
        except Exception as exc:
            frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename != __file__]
            where = f" ({os.path.basename(frames[-1].filename)}:{frames[-1].lineno})" if frames else ""
            outside = is_infrastructure(exc) or functions[index] is None  # a missing module is not the response's
            reply({"error": f"{type(exc).__name__}: {exc}{where}", **({"infra": True} if outside else {})})


if __name__ == "__main__":
    main()
