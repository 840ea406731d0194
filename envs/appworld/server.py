"""The lite world served over AppWorld's HTTP protocol, so one client (client.RemoteClient) covers both backends.

    python -m envs.appworld.server --port 8000        # binds 127.0.0.1 only

POST /initialize {task_id, experiment_name}, /execute {task_id, code}, /task_completed {task_id},
/evaluate {task_id}, /close {task_id}; every reply is {"output": ...}; errors are {"detail": message} with 4xx/5xx.
GET / answers {"output": "ok"} (a health check).
"""
import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from envs.appworld.lite.backend import LiteBackend

ROUTES = {"/initialize": lambda b, r: b.initialize(r["task_id"], r.get("experiment_name", "credo")),
          "/execute": lambda b, r: b.execute(r["task_id"], r["code"]),
          "/task_completed": lambda b, r: b.task_completed(r["task_id"]),
          "/evaluate": lambda b, r: b.evaluate(r["task_id"]),
          "/close": lambda b, r: b.close(r["task_id"])}


class Handler(BaseHTTPRequestHandler):
    backend = None  # set by make_server

    def _reply(self, status: int, body: dict):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._reply(200, {"output": "ok"}) if self.path == "/" else self._reply(404, {"detail": "not found"})

    def do_POST(self):
        route = ROUTES.get(self.path)
        if route is None:
            return self._reply(404, {"detail": f"no endpoint {self.path}"})
        try:
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            output = route(self.backend, request)
        except (KeyError, TypeError, ValueError) as exc:  # a bad request or an unknown task
            return self._reply(422, {"detail": f"{type(exc).__name__}: {exc}"})
        except Exception as exc:  # noqa: BLE001 - the server must keep serving other episodes
            return self._reply(500, {"detail": f"{type(exc).__name__}: {exc}"})
        self._reply(200, {"output": output})

    def log_message(self, *args):  # quiet: one line per request would flood a training log
        pass


def make_server(port: int = 0, backend=None) -> ThreadingHTTPServer:
    """A server on 127.0.0.1:port (0 = any free port; see server.server_address) over `backend` (a LiteBackend)."""
    handler = type("LiteHandler", (Handler,), {"backend": backend or LiteBackend()})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    return server


def serve_in_thread(port: int = 0, backend=None):
    """(server, url) with the server running in a daemon thread; stop with server.shutdown()."""
    server = make_server(port, backend)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=8000)
    args = p.parse_args(argv)
    server = make_server(args.port)
    print(f"lite AppWorld server on http://127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
