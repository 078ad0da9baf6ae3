#!/usr/bin/env bash
# verl (the GPU RL backend) in its own venv, .venv-verl: `bash scripts/setup-verl.sh`.
#
# A venv of its own because verl's fastapi clashes with Prefect's pin. The `verl` extra: verl
# 0.9.1 (torch with CUDA, Ray, vLLM on GPU machines) plus what its agent loop imports without
# declaring it (cachetools, uvicorn, fastapi). On a CPU machine it installs and its agent loop
# runs (tests/training/test_rl_verl.py); its trainer needs GPUs. sweflow finds it beside .venv (or through
# SWEFLOW_VERL_PYTHON). Idempotent: a stamp holds what was installed. About 6.5 GB.
source "$(dirname "${BASH_SOURCE[0]}")/side-venv.sh"

side_venv_begin verl verl verl
side_venv_done "verl.experimental.agent_loop, sweflow.training.rl.episode" \
  'import verl, torch; print("verl", verl.__version__, "torch", torch.__version__)'
