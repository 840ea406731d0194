#!/usr/bin/env bash
# The README's test command: setup, then the whole pytest suite (CPU; slow real-launcher tests included).
#   bash scripts/test.sh            everything (what CI runs)
#   bash scripts/test.sh quick      the tests not marked slow: no train.py launch, a few minutes, for use while working
# Other arguments go to pytest, e.g. `bash scripts/test.sh quick -x` or `bash scripts/test.sh tests/update/test_loss.py`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
if [ "${1:-}" = quick ]; then
  shift
  # a test that launches train.py without the slow marker fails here, naming itself (tests/helpers.run_train)
  export CREDO_QUICK_TESTS=1
  exec python -m pytest tests -m "not slow" "$@"
fi
python -m pytest tests "$@"
