#!/usr/bin/env bash
# The README's test command: setup, then the whole pytest suite (CPU; slow real-launcher tests included).
#   bash scripts/test.sh            everything (what CI runs)
#   bash scripts/test.sh quick      the tests not marked slow: no train.py launch, a few minutes, for use while working
# Other arguments go to pytest, e.g. `bash scripts/test.sh quick -x` or `bash scripts/test.sh tests/update/test_loss.py`;
# a -m EXPR of yours is combined with each phase's own.
# Two phases, both always run with the same arguments: the tests not marked serial on CREDO_TEST_WORKERS pytest-xdist
# workers (default 2, CI's cores; 0 runs them in one process), then the tests marked serial alone (tests/conftest.py:
# they look at the whole machine or checkout, or assert a wall-clock bound). The exit status is the first phase's
# failure, else the second's; the last lines give each phase's pytest summary.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
exprs=()  # each phase's -m: these, and "not serial" or "serial"
if [ "${1:-}" = quick ]; then
  shift
  exprs+=("(not slow)")
  # a test that launches train.py without the slow marker fails here, naming itself (tests/helpers.run_train)
  export CREDO_QUICK_TESTS=1
fi
args=()
while [ $# -gt 0 ]; do  # pytest keeps only the last -m given: the caller's joins each phase's expression instead
  case "$1" in
    -m|--markexpr) [ $# -ge 2 ] || { echo "test.sh: $1 needs an expression" >&2; exit 4; }
                   exprs+=("($2)"); shift 2 ;;
    --markexpr=*) exprs+=("(${1#--markexpr=})"); shift ;;
    -m?*) exprs+=("(${1#-m})"); shift ;;
    *) args+=("$1"); shift ;;
  esac
done
color=()
[ ! -t 1 ] || color=(--color=yes)  # pytest writes into tee below, not to the terminal
summaries=()

phase() {  # phase NAME SELECTION [PYTEST ARGS]: pytest's exit status
  local name=$1 expr=$2 log rc=0
  [ ${#exprs[@]} = 0 ] || expr="$(printf '%s and ' "${exprs[@]}")$2"
  shift 2
  log=$(mktemp)
  echo "[test] $name phase: pytest tests -m \"$expr\" $*"
  # tee -i: on Ctrl-C pytest still prints its summary and exits 2, and tee passes that on
  python -m pytest tests -m "$expr" ${color[@]+"${color[@]}"} ${args[@]+"${args[@]}"} "$@" 2>&1 | tee -i "$log" \
    || rc=${PIPESTATUS[0]}
  summaries+=("$name: $(grep -aE '^[0-9]+ tests selected' "$log" | tail -1); $(grep -aE \
    '(passed|failed|skipped|error|deselected|no tests ran).* in [0-9.]+s' "$log" | tail -1 \
    | sed -E 's/\x1b\[[0-9;]*m//g; s/^=+ //; s/ =+$//')")
  rm -f "$log"
  return "$rc"
}

rc1=0
phase parallel "not serial" -n "${CREDO_TEST_WORKERS:-2}" || rc1=$?
if [ "$rc1" != 0 ] && [ "$rc1" != 1 ] && [ "$rc1" != 5 ]; then  # interrupted, an internal or a usage error: stop
  exit "$rc1"
fi
rc2=0
phase serial "serial" -n 0 || rc2=$?
printf '[test] %s\n' "${summaries[@]}"
# "no test selected" (5) in one phase is fine (e.g. -k naming only serial tests); in both, it is pytest's answer
if [ "$rc1" = 5 ] && [ "$rc2" = 5 ]; then exit 5; fi
[ "$rc1" = 0 ] || [ "$rc1" = 5 ] || exit "$rc1"
[ "$rc2" = 5 ] || exit "$rc2"
