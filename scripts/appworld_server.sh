#!/usr/bin/env bash
# The real AppWorld environment server(s), in AppWorld's own venv: the `appworld` package needs pydantic 1 and an
# old FastAPI, so it cannot share credo's venv. Needs the internet once (the package, `appworld install`, which
# unpacks its encrypted code, and `appworld download data`). Code and data stay under $APPWORLD_ROOT (default
# .cache/appworld, git-ignored): AppWorld's authors ask that they never be published, so never commit them.
#
#   bash scripts/appworld_server.sh                       # one server: http://127.0.0.1:8000
#   NUM_SERVERS=4 PORT=8000 bash scripts/appworld_server.sh   # ports 8000-8003: one per concurrent episode
#
# Then point credo at them (README, "AppWorld"), with flags (or the CREDO_APPWORLD_* variables that are their defaults):
#   train.py --env appworld --appworld_backend remote --appworld_url http://127.0.0.1:8000,http://127.0.0.1:8001,... \
#       --appworld_tasks_dir $APPWORLD_ROOT/data/datasets     # train.txt, dev.txt, test_normal.txt, ...
# The servers should listen on 127.0.0.1 only (uvicorn's default host); check `appworld serve environment --help`
# for your version and pass host flags through APPWORLD_SERVE_ARGS if it differs. Not runnable on the offline
# machines credo is developed on: tested there only through the lite server, which speaks the same protocol.
set -euo pipefail
cd "$(dirname "$0")/.."
export APPWORLD_ROOT=${APPWORLD_ROOT:-$PWD/.cache/appworld}
APPWORLD_VENV=${APPWORLD_VENV:-$APPWORLD_ROOT/venv}
PYTHON=${PYTHON:-python3}
PORT=${PORT:-8000}
NUM_SERVERS=${NUM_SERVERS:-1}
mkdir -p "$APPWORLD_ROOT"
if [ ! -x "$APPWORLD_VENV/bin/appworld" ]; then
    "$PYTHON" -m venv "$APPWORLD_VENV"
    "$APPWORLD_VENV/bin/pip" install --upgrade pip
    "$APPWORLD_VENV/bin/pip" install appworld
    (cd "$APPWORLD_ROOT" && "$APPWORLD_VENV/bin/appworld" install)
fi
if [ ! -d "$APPWORLD_ROOT/data" ]; then
    (cd "$APPWORLD_ROOT" && "$APPWORLD_VENV/bin/appworld" download data)
fi
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT INT TERM
for ((i = 0; i < NUM_SERVERS; i++)); do
    (cd "$APPWORLD_ROOT" && exec "$APPWORLD_VENV/bin/appworld" serve environment --port $((PORT + i)) \
        ${APPWORLD_SERVE_ARGS:-}) &
    pids+=($!)
    echo "AppWorld server $((i + 1))/$NUM_SERVERS: http://127.0.0.1:$((PORT + i))"
done
wait
