#!/usr/bin/env bash
# The README's test command: setup, then the whole pytest suite (CPU; slow real-launcher tests included).
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not slow"` for the quick unit tests only.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
python -m pytest tests "$@"
