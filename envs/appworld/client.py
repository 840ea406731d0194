"""The client surface the AppWorld env talks to, and its HTTP implementation.

Both backends answer the same five calls:
    initialize(task_id, experiment_name) -> {"instruction", "supervisor", ...}
    execute(task_id, code) -> output text          task_completed(task_id) -> bool
    evaluate(task_id) -> {"success", "pass_count", "num_tests", "passes", "failures", "difficulty"}
    close(task_id)
`lite.backend.LiteBackend` does it locally (each cell sandboxed, the world in a host process); `RemoteClient`
does it over HTTP against AppWorld's own server (`appworld serve environment --port P`, in AppWorld's venv) or ours
(`python -m envs.appworld.server`). Every endpoint is a POST of JSON whose reply is wrapped as {"output": ...}.
"""
import json
import os
import threading
import time
import urllib.error
import urllib.request


class AppWorldServerError(RuntimeError):
    pass


class RemoteClient:
    """HTTP client with a timeout per request and retries with backoff on transient failures.

    `execute` is not idempotent (a cell may move money), so it is retried only when the connection was refused,
    i.e. the request never reached a server; every other call is safe to repeat.
    """

    def __init__(self, url: str, timeout_s: float = 120.0, retries: int = 3, backoff_s: float = 1.0):
        self.url, self.timeout_s, self.retries, self.backoff_s = url.rstrip("/"), timeout_s, retries, backoff_s

    def _post(self, endpoint: str, payload: dict, idempotent: bool = True):
        data = json.dumps(payload).encode()
        last = None
        for attempt in range(self.retries + 1):
            request = urllib.request.Request(self.url + endpoint, data=data, method="POST",
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    return json.loads(response.read().decode())["output"]
            except urllib.error.HTTPError as exc:  # the server answered: retry only its own transient failures
                body = exc.read().decode(errors="replace")[:2000]
                last = AppWorldServerError(f"{endpoint} -> HTTP {exc.code}: {body}")
                if exc.code < 500 or not idempotent:
                    raise last from None
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                last = AppWorldServerError(f"{endpoint} -> {self.url} unreachable: {reason}")
                if not idempotent and not isinstance(reason, ConnectionRefusedError):
                    raise last from None
            if attempt < self.retries:
                time.sleep(self.backoff_s * 2 ** attempt)
        raise last

    def initialize(self, task_id: str, experiment_name: str = "credo") -> dict:
        output = self._post("/initialize", {"task_id": task_id, "experiment_name": experiment_name})
        output = output if isinstance(output, dict) else {}
        task = output.get("task") if isinstance(output.get("task"), dict) else {}
        return {**task, **output}

    def execute(self, task_id: str, code: str) -> str:
        return str(self._post("/execute", {"task_id": task_id, "code": code}, idempotent=False))

    def task_completed(self, task_id: str) -> bool:
        return bool(self._post("/task_completed", {"task_id": task_id}))

    def evaluate(self, task_id: str) -> dict:
        return self._post("/evaluate", {"task_id": task_id, "suppress_errors": True})

    def close(self, task_id: str) -> None:
        self._post("/close", {"task_id": task_id})


class ServerPool:
    """Servers handed out one episode at a time: AppWorld's server keeps one world per task id, so concurrent
    episodes (a group of G samples of one task) each need their own server (one per rollout worker, as in LOOP).
    An episode holds its server from reset to its end, and a rollout resets all its episodes before the first
    turn: a rank needs as many servers as episodes in flight."""

    def __init__(self, urls: list):
        self.free, self.cond = list(urls), threading.Condition()

    def acquire(self, timeout_s: float = 120.0) -> str:
        with self.cond:
            if not self.cond.wait_for(lambda: self.free, timeout=timeout_s):
                raise AppWorldServerError(f"no AppWorld server became free within {timeout_s:.0f}s: a rank needs "
                                          "one server per episode in flight (prompts x num_generations per rank; "
                                          "eval.py: --batch_size)")
            return self.free.pop(0)

    def release(self, url: str):
        with self.cond:
            self.free.append(url)
            self.cond.notify()


_POOLS = {}
_POOLS_LOCK = threading.Lock()


def rank_share(urls: list, rank: int, world_size: int) -> list:
    """This rank's servers: every world_size-th URL from position rank, so ranks never share a server."""
    if world_size <= 1:
        return urls
    if len(urls) < world_size:
        raise AppWorldServerError(f"{len(urls)} AppWorld server(s) for {world_size} ranks: give each rank its own")
    return urls[rank::world_size]


def server_pool(urls: str) -> ServerPool:
    """The process-wide pool of this rank's share of a comma-separated list of server URLs."""
    with _POOLS_LOCK:
        if urls not in _POOLS:
            share = rank_share([u.strip() for u in urls.split(",") if u.strip()], int(os.environ.get("RANK", 0)),
                               int(os.environ.get("WORLD_SIZE", 1)))
            _POOLS[urls] = ServerPool(share)
        return _POOLS[urls]
