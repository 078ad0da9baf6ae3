#!/usr/bin/env bash
# The main job on the embedded default config: `bash scripts/demo.sh [CONFIG [KEY=VALUE ...]]`
# (overrides by dotted name, e.g. `bash scripts/demo.sh configs/demo.yaml agent.max_steps=12`).
#
# Sets everything up (system packages, .venv, the serving stack in .venv-serve), starts a local
# Prefect server and a worker (left running, so the UI stays up), deploys the pipeline and runs
# the `end-to-end/demo` deployment on configs/demo.yaml (or CONFIG), watching it to the end.
# `python deployments/local.py down` stops the server and the worker (by PID).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
bash scripts/setup.sh
bash scripts/setup-serve.sh
.venv/bin/python scripts/prefetch.py   # the Debian base layer (debootstrap) and test wheels

export PREFECT_SERVER_ANALYTICS_ENABLED=false DO_NOT_TRACK=1
PY=$ROOT/.venv/bin/python
STATE=$ROOT/runs/prefect
"$PY" deployments/local.py up --state "$STATE"

params=()
if [[ $# -gt 0 ]]; then  # validated here, before Prefect: a bad field is one line, exit 2
  params=(--params "$("$ROOT/.venv/bin/sweflow" pipeline config --json "$@")")
fi
export PATH=$ROOT/.venv/bin:$PATH PREFECT_API_URL=http://127.0.0.1:4200/api PREFECT_HOME=$STATE/home
start=$(date +%s)
rc=0
# `prefect deployment run end-to-end/demo`, then one line per stage as it starts and ends (name,
# state, seconds, its key figure); the flow run's events stay in the UI
"$PY" deployments/local.py run end-to-end/demo --state "$STATE" "${params[@]}" || rc=$?
echo
if [[ -f runs/demo/report/summary.txt ]]; then
  echo "what the run did and learned:"
  cat runs/demo/report/summary.txt
  echo
fi
echo "pipeline: $(( $(date +%s) - start )) s, exit $rc"
echo "Prefect UI:      http://127.0.0.1:4200   (server and worker logs: $STATE)"
echo "reports:         $ROOT/runs/demo/eval (swebench summary + Markdown), runs/demo/validate/validation.md"
echo "trajectories:    $ROOT/runs/demo/collect (SFT data), runs/demo/infer (preds.json)"
echo "stop the stack:  .venv/bin/python deployments/local.py down"
exit "$rc"
