"""A tracker that cannot take the run is named before any work starts: the client library is
missing, the MLflow server does not answer, a store's folder cannot be written, W&B online has
no API key. A training run that finds out after its first hour loses the hour."""

from __future__ import annotations

import importlib.util
import netrc
import os
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

from sweflow.paths import output_folder_problem
from sweflow.tracking.config import MLflowSettings, TrackingConfig, WandbSettings

TIMEOUT_S = 5.0
INSTALL = "pip install 'sweflow[track]'"


def tracking_problems(config: TrackingConfig, root: Path | None = None) -> list[str]:
    """What stops ``config``'s trackers, each as ``field: why``; relative folders are relative
    to ``root`` (default: this one)."""
    root = root or Path.cwd()
    problems = []
    if config.mlflow is not None:
        problems += [f"tracking.mlflow.{p}" for p in mlflow_problems(config.mlflow, root)]
    if config.wandb is not None:
        problems += [f"tracking.wandb.{p}" for p in wandb_problems(config.wandb, root)]
    return problems


def mlflow_problems(settings: MLflowSettings, root: Path) -> list[str]:
    if importlib.util.find_spec("mlflow") is None:
        return [f"tracking_uri: reporting to MLflow needs its client: {INSTALL}"]
    uri = settings.tracking_uri
    if settings.served:
        problem = server_problem(uri)
        return [] if problem is None else [f"tracking_uri: {uri} {problem}"]
    if (folder := store_folder(uri)) is not None:
        folder = folder if folder.is_absolute() else root / folder
        if (problem := output_folder_problem(folder)) is not None:
            return [f"tracking_uri: {uri}: {problem}"]
    return []


def store_folder(uri: str) -> Path | None:
    """The folder a local store writes into: ``file:PATH`` itself, ``sqlite:///PATH``'s parent
    (SQLAlchemy's: three slashes and a relative path, four and an absolute one); else None."""
    scheme, _, rest = uri.partition(":")
    if scheme.lower() == "file":
        return Path(urlparse(uri).path)
    if scheme.lower() == "sqlite" and rest.startswith("///"):
        return Path(rest[3:]).parent
    return None


def server_problem(uri: str) -> str | None:
    """Why the MLflow server at ``uri`` cannot take a run (its /health does not answer OK)."""
    try:
        with urllib.request.urlopen(f"{uri}/health", timeout=TIMEOUT_S) as response:
            if response.status == 200:
                return None
            return f"answers HTTP {response.status} at /health: is it an MLflow tracking server?"
    except urllib.error.HTTPError as exc:
        return f"answers HTTP {exc.code} at /health: is it an MLflow tracking server?"
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"is not reachable ({reason}): start the server, or fix the URI"


def wandb_problems(settings: WandbSettings, root: Path) -> list[str]:
    if importlib.util.find_spec("wandb") is None:
        return [f"project: reporting to W&B needs its client: {INSTALL}"]
    problems = []
    if settings.dir is not None:
        folder = settings.dir if settings.dir.is_absolute() else root / settings.dir
        if (problem := output_folder_problem(folder)) is not None:
            problems.append(f"dir: {problem}")
    if settings.mode == "online" and not wandb_api_key():
        problems.append(
            "mode: online needs an API key (WANDB_API_KEY, or `wandb login`); mode offline "
            "writes the run folder for a later `wandb sync`"
        )
    return problems


def wandb_api_key() -> bool:
    """Whether W&B finds an API key: WANDB_API_KEY, or a netrc entry for its server."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or ""
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False
