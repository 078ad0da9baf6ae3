"""A vLLM server started the first time it is asked for, stopped (by PID) when its block ends.

Starting vLLM on a CPU takes minutes, so whoever may need a model (a pipeline run whose agent
stages may all be cached, a benchmark continued with every run saved) holds one of these and
asks it only for a run that is left: when nothing asks, nothing starts.

with ServedOnDemand(lambda: ServeConfig(model=folder, port=free_port()), log) as server:
    base_url = server.get().base_url   # vLLM starts here, once, whichever thread asks first
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from sweflow.progress import Progress
from sweflow.serving.vllm import ServeConfig, vllm_server


class ServedOnDemand:
    """One model's server, started by the first :meth:`get`; ``config`` is made then too (its
    port chosen, its model folder prepared), so a server never asked for costs nothing."""

    def __init__(
        self,
        config: Callable[[], ServeConfig],
        log_path: Path,
        progress: Progress | None = None,
    ) -> None:
        self.config, self.log_path, self.progress = config, log_path, progress
        self._stack = contextlib.ExitStack()
        self._lock = threading.Lock()
        self._served: ServeConfig | None = None

    def get(self) -> ServeConfig:
        """The running server's config (``base_url``, ``name``), started if it is not yet."""
        with self._lock:
            if self._served is None:
                server = vllm_server(self.config(), self.log_path, self.progress)
                self._served = self._stack.enter_context(server)
            return self._served

    def close(self) -> None:
        """Stop the server if one was started; a later :meth:`get` starts a new one."""
        self.__exit__(None, None, None)

    def __enter__(self) -> ServedOnDemand:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Stop the server: gracefully, or at once when the block failed (sweflow.serving.vllm)."""
        with self._lock:
            self._served = None
            self._stack.__exit__(kind, value, traceback)
