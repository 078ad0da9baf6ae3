# Sourced by setup-serve.sh, setup-verl.sh and setup-skyrl.sh: a venv beside .venv for a stack
# whose pins clash with Prefect's (vLLM, verl, SkyRL). Idempotent: a stamp holds the extra and
# pyproject.toml's digest. SIDE_PYTHON: the interpreter the venv is made with (default .venv's);
# SIDE_EXCLUDES: a requirements file of packages left out of the resolution (uv's --excludes).
#
#   side_venv_begin NAME EXTRA IMPORTS [REQUIREMENT]
#                                       # .venv-NAME; exits 0 when EXTRA is installed and IMPORTS
#                                       # import; else installs -e .[EXTRA], or REQUIREMENT
#                                       # alone when given (a tool without sweflow; sets PY)
#   side_venv_done IMPORTS VERSION_CODE # checks IMPORTS, writes the stamp, prints VERSION_CODE
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
source scripts/install.sh

side_venv_begin() {
  local name=$1 extra=$2 imports=$3 requirement=${4:-}
  TAG="[setup-$name]"
  bash scripts/setup.sh
  exec 9>"$ROOT/.setup.lock"
  flock 9
  local venv=$ROOT/.venv-$name
  PY=$venv/bin/python
  [[ -x $PY ]] || "${SIDE_PYTHON:-$ROOT/.venv/bin/python}" -m venv "$venv"
  STAMP=$venv/.sweflow-$name-installed
  WANT="$extra $(sha256sum pyproject.toml | cut -d' ' -f1)"
  if [[ $(cat "$STAMP" 2>/dev/null || true) == "$WANT" ]] && "$PY" -c "import $imports" 2>/dev/null
  then
    echo "$TAG $extra: up to date"
    exit 0
  fi
  local target=(-e ".[$extra]")
  [[ -n $requirement ]] && target=("$requirement")
  echo "$TAG installing ${target[*]} (a minute or more the first time)"
  rm -f "$STAMP"
  [[ -n ${SIDE_EXCLUDES:-} ]] && target+=(--excludes "$SIDE_EXCLUDES")
  venv_install "$PY" "${target[@]}"
}

side_venv_done() {
  local imports=$1 version=$2
  "$PY" -c "import $imports" || { echo "$TAG error: $imports do not import" >&2; exit 1; }
  echo "$WANT" >"$STAMP"
  echo "$TAG ready: $("$PY" -c "$version" 2>/dev/null | tail -n1)"
}
