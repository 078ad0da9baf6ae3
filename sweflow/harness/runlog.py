"""``run_instance.log``: the harness's per-instance log, in its format, safe under concurrency.

swebench's ``setup_logger`` registers a logger named after the instance, so two gradings of one
instance at once (RL rollouts do that) would share handlers and write into each other's files.
This logger is private to one call; its lines look exactly like the harness's.
"""

from __future__ import annotations

import logging
from pathlib import Path

FORMAT = "%(asctime)s - %(levelname)s - %(message)s"  # swebench.logger.setup_logger's


class RunLog:
    """Lines for one grading's run_instance.log, or nowhere when ``path`` is None."""

    def __init__(self, name: str, path: Path | None) -> None:
        self.path = path
        self._logger = logging.Logger(name, logging.INFO)  # not in logging's registry
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            handler = logging.FileHandler(path, mode="w", encoding="utf-8")
            handler.setFormatter(logging.Formatter(FORMAT))
            self._logger.addHandler(handler)
        else:
            self._logger.addHandler(logging.NullHandler())

    def info(self, message: str) -> None:
        self._logger.info(message)

    def error(self, message: str) -> None:
        self._logger.error(message)

    def close(self) -> None:
        for handler in list(self._logger.handlers):
            handler.close()
            self._logger.removeHandler(handler)
