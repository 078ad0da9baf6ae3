#!/usr/bin/env bash
# The MLflow tracking server and its UI in their own venv, .venv-mlflow: `bash scripts/setup-mlflow.sh`,
# then `.venv-mlflow/bin/mlflow server --host 127.0.0.1 --port 5000 --backend-store-uri
# sqlite:///runs/mlflow.db` (docs/tracking.md). sweflow reports to it with the client in .venv
# (the `track` extra); the server is mlflow itself, whose pins clash with .venv's (pyarrow<26) and
# which brings scikit-learn and scipy: the `mlflow-server` extra's requirement, without sweflow.
# The tracking tests start it (tests/tracking_servers.py). Idempotent: a stamp holds what was
# installed. About 850 MB.
source "$(dirname "${BASH_SOURCE[0]}")/side-venv.sh"

requirement=$(sed -n 's/^mlflow-server = \["\(.*\)"\]$/\1/p' pyproject.toml)
side_venv_begin mlflow mlflow-server mlflow.server "$requirement"
side_venv_done mlflow.server 'import mlflow; print("mlflow", mlflow.__version__)'
