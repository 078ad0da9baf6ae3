#!/usr/bin/env bash
# Prepare this checkout: system packages (as root) and a virtualenv with sweflow installed.
# Idempotent: a second run does no apt and no pip work unless something changed.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
say() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }
source scripts/install.sh

# One setup at a time per checkout (parallel test runs would race on apt and pip).
exec 9>"$ROOT/.setup.lock"
flock 9

# --- system packages --------------------------------------------------------------------------
# gcc + libc6-dev: the sandbox's tiny C init; debootstrap: Debian base rootfs layers;
# squashfs-tools + erofs-utils: read-only layer images; uidmap: rootless user namespaces;
# docker.io: the docker backend and the comparison runs; python3-venv: the virtualenv below;
# chromium: the trajectory inspector's tests open its page in a real headless browser.
APT_PACKAGES=(gcc libc6-dev git debootstrap squashfs-tools erofs-utils uidmap docker.io
              python3 python3-venv chromium)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ $status == installed ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  say "system packages: all present"
elif [[ $(id -u) -ne 0 ]]; then
  say "system packages missing: ${missing[*]}"
  say "as root, run: apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
  say "continuing with the virtualenv"
else
  export DEBIAN_FRONTEND=noninteractive
  fresh=$(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages*' -mtime -1 2>/dev/null | head -n1)
  if [[ -z $fresh ]]; then
    say "apt-get update (package lists missing or older than a day)"
    apt-get update -qq
  fi
  say "apt-get install: ${missing[*]}"
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- virtualenv ---------------------------------------------------------------------------------
PYTHON=${PYTHON:-python3}
VENV=$ROOT/.venv
STAMP=$VENV/.sweflow-installed

if [[ ! -x $VENV/bin/python ]]; then
  command -v "$PYTHON" >/dev/null || die "$PYTHON not found; install Python 3.11+ (or set PYTHON=...)"
  "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || die "$("$PYTHON" -V 2>&1) is too old: sweflow needs Python 3.11+ (set PYTHON=/path/to/python3.11)"
  say "creating .venv with $("$PYTHON" -V 2>&1)"
  "$PYTHON" -m venv "$VENV" || die "python -m venv failed (on Debian: apt-get install python3-venv)"
fi
"$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || die ".venv has $("$VENV/bin/python" -V 2>&1); remove .venv and rerun with Python 3.11+"

want=$(sha256sum pyproject.toml | cut -d' ' -f1)
have=$(cat "$STAMP" 2>/dev/null || true)
if [[ $want == "$have" && -x $VENV/bin/sweflow ]]; then
  say "python packages: up to date"
else
  say "installing -e '.[docker,e2b,pipeline,ray,train,track,test,dev]' (torch's CPU build; under a minute)"
  rm -f "$STAMP"
  venv_install "$VENV/bin/python" -e '.[docker,e2b,pipeline,ray,train,track,test,dev]'
  echo "$want" >"$STAMP"
fi
say "ready: $("$VENV/bin/python" -V 2>&1) in .venv"
