# Sourced by setup.sh and side-venv.sh: `venv_install PYTHON ARGS...` installs into PYTHON's venv
# with uv (pinned, itself installed into .venv by pip), about ten times faster than pip on this
# project's stacks: .venv in 28 s instead of 5.4 min, cold cache. uv reads no pip
# configuration, so the machine's pip settings that decide what is installed are passed on:
# find-links (a local CPU build of torch) and constraint files (caps on torch's release).
UV_VERSION=0.13.9

ensure_uv() {
  local venv_python=$1 uv
  uv=$(dirname "$venv_python")/uv
  if [[ ! -x $uv ]] || [[ $("$uv" --version 2>/dev/null) != "uv $UV_VERSION"* ]]; then
    "$venv_python" -m pip install -q --disable-pip-version-check "uv==$UV_VERSION"
  fi
  UV=$uv
}

# pip's own setting NAME (find-links, constraint): its environment variable, else its config
pip_setting() {
  local name=$1 env_name
  env_name=PIP_$(tr 'a-z-' 'A-Z_' <<<"$name")
  if [[ -n ${!env_name:-} ]]; then
    printf '%s\n' "${!env_name}"
  else
    "$ROOT/.venv/bin/python" -m pip config get "global.$name" 2>/dev/null || true
  fi
}

venv_install() {
  local python=$1
  shift
  ensure_uv "$ROOT/.venv/bin/python"
  local flags=() value
  for value in $(pip_setting find-links); do flags+=(--find-links "$value"); done
  for value in $(pip_setting constraint); do [[ -f $value ]] && flags+=(--constraint "$value"); done
  # --compile-bytecode: as pip does; without it a fresh process compiles what it imports first
  # (a CLI started by a test missed its 10 s start-up window that way)
  "$UV" pip install -q --compile-bytecode --python "$python" "${flags[@]}" "$@"
}
