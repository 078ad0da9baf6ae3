#!/usr/bin/env bash
# SkyRL (the `skyrl` RL backend) in its own venv, .venv-skyrl: `bash scripts/setup-skyrl.sh`.
#
# skyrl-train 0.3.1 runs on Python 3.12 only: the venv is made with python3.12 from PATH or
# pyenv (SWEFLOW_PYTHON312 names another). flash-attn, which SkyRL's trainer imports, is left out
# (scripts/skyrl-excludes.txt): it builds only with CUDA, so on a GPU machine run
# `.venv-skyrl/bin/python -m pip install flash-attn --no-build-isolation` after this. Without it,
# sweflow's generator, SkyRL's remote inference engines and its config checks run; the trainer
# does not. sweflow finds the venv beside .venv (or through SWEFLOW_SKYRL_PYTHON). About 6 GB.
set -euo pipefail
NO_PYTHON312=3  # the exit status that says only the interpreter is missing (tests skip on it)

python312() {
  local candidate
  for candidate in "${SWEFLOW_PYTHON312:-}" "$(command -v python3.12 2>/dev/null || true)" \
    "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12; do
    if [[ -n $candidate && -x $candidate ]] && "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
      echo "$candidate"
      return
    fi
  done
  echo "[setup-skyrl] error: SkyRL needs Python 3.12: none on PATH or under pyenv (set SWEFLOW_PYTHON312)" >&2
  exit "$NO_PYTHON312"
}

SIDE_PYTHON=$(python312)
SIDE_EXCLUDES=scripts/skyrl-excludes.txt  # side-venv.sh works from the repository root
source "$(dirname "${BASH_SOURCE[0]}")/side-venv.sh"

side_venv_begin skyrl skyrl "skyrl_train.generators.base, sweflow.training.rl.episode"
side_venv_done "skyrl_train.generators.base, skyrl_train.inference_engines.remote_inference_engine, sweflow.training.rl.episode" \
  'import skyrl_train, torch; from importlib.metadata import version; print("skyrl-train", version("skyrl-train"), "torch", torch.__version__)'
