"""Experiment tracking: one run per pipeline run (or command), reported to MLflow, W&B and
TensorBoard at once (sweflow.tracking.run); its settings (sweflow.tracking.config) are checked
before any work (sweflow.tracking.check)."""

from sweflow.tracking.check import tracking_problems
from sweflow.tracking.config import MLflowSettings, TrackingConfig, WandbSettings
from sweflow.tracking.run import TrackingRun, open_tracking

__all__ = [
    "MLflowSettings",
    "TrackingConfig",
    "TrackingRun",
    "WandbSettings",
    "open_tracking",
    "tracking_problems",
]
