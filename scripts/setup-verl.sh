#!/usr/bin/env bash
# verl (the GPU RL backend) in its own venv, .venv-verl: `bash scripts/setup-verl.sh`.
#
# A venv of its own because verl's fastapi clashes with Prefect's pin. The `verl` extra: verl
# 0.9.1 (torch with CUDA, Ray, vLLM on GPU machines) plus what its agent loop imports without
# declaring it (cachetools, uvicorn, fastapi). On a CPU machine it installs and its agent loop
# runs (tests/test_rl_verl.py); its trainer needs GPUs. sweflow finds it beside .venv (or through
# SWEFLOW_VERL_PYTHON). Idempotent: a stamp holds what was installed. About 6.5 GB.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
say() { printf '[setup-verl] %s\n' "$*"; }

bash scripts/setup.sh

exec 9>"$ROOT/.setup.lock"
flock 9

VENV=$ROOT/.venv-verl
PY=$VENV/bin/python
[[ -x $PY ]] || "$ROOT/.venv/bin/python" -m venv "$VENV"
STAMP=$VENV/.sweflow-verl-installed
want="verl $(sha256sum pyproject.toml | cut -d' ' -f1)"
if [[ $(cat "$STAMP" 2>/dev/null || true) == "$want" ]] && "$PY" -c 'import verl' 2>/dev/null; then
  say "verl: up to date"
  exit 0
fi

say "pip install -e '.[verl]' (several minutes the first time)"
rm -f "$STAMP"
"$PY" -m pip install -q --disable-pip-version-check -e ".[verl]"
"$PY" -c 'import verl.experimental.agent_loop, sweflow.training.episode' \
  || { say "error: verl's agent loop does not import"; exit 1; }
echo "$want" >"$STAMP"
say "ready: $("$PY" -c 'import verl, torch; print("verl", verl.__version__, "torch", torch.__version__)' 2>/dev/null | tail -n1)"
