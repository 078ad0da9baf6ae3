"""The endpoint's live sandboxes: created from a template, found by id, closed at their deadline.

A template names a built instance of the layer store (its environment and repository) or a base
(``debian:bookworm``, ``host``, a rootfs directory); ``templates`` turns the name into a spec.
Each sandbox is a :class:`~sweflow.sandbox.local.LocalSandbox`; its deadline is the create's
``timeout`` (E2B's default 300 s), pushed back by set-timeout and connect, as E2B does. Its
``token`` is what its envd routes require (:mod:`.auth`). A sandbox is closed if anything after
its open fails, and a create that ends after :meth:`Registry.close_all` closes its own sandbox:
none outlives the endpoint unlisted.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sweflow.e2b_endpoint.auth import new_secret
from sweflow.errors import SweflowError
from sweflow.sandbox.local import LocalSandbox
from sweflow.sandbox.local.hostroot import is_host_root
from sweflow.sandbox.spec import SandboxSpec

DEFAULT_TIMEOUT_S = 300
MAX_TIMEOUT_S = 24 * 3600


class UnknownSandbox(SweflowError):
    """No live sandbox has this id (never created, killed, or past its timeout)."""


class UnknownTemplate(SweflowError):
    """The template names neither a built instance nor a base."""


@dataclass
class Live:
    """One sandbox of the endpoint and what the control API reports of it."""

    id: str
    template: str
    sandbox: LocalSandbox
    metadata: dict[str, str]
    env: dict[str, str]
    started_at: float
    end_at: float
    token: str = field(default_factory=new_secret)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def host_files(self) -> bool:
        """Whether the host's own / is one of its layers (the ``host`` base): then its files
        are served only if any host user may read them (a command still runs as root)."""
        return any(is_host_root(layer) for layer in self.sandbox.spec.layers)

    def iso(self, moment: float) -> str:
        return datetime.fromtimestamp(moment, UTC).isoformat().replace("+00:00", "Z")


class Registry:
    """Live sandboxes by id; thread-safe (the ASGI app calls it from worker threads)."""

    def __init__(self, templates: Callable[[str], SandboxSpec]) -> None:
        self._templates = templates
        self._live: dict[str, Live] = {}
        self._lock = threading.Lock()
        self._closed = False

    def create(
        self,
        template: str,
        *,
        timeout: int | None = None,
        metadata: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
        network: bool | None = None,
    ) -> Live:
        """Open a sandbox of ``template`` (arguments already validated: nothing after the open
        may fail on them) and list it."""
        lifetime = _clamp(timeout)
        spec = self._templates(template)
        if env:
            spec = spec.model_copy(update={"env": {**spec.env, **env}})
        if network is not None:
            spec = spec.model_copy(update={"network": network})
        sandbox = LocalSandbox(spec)
        try:
            now = time.time()
            live = Live(
                id=f"sb{uuid.uuid4().hex[:18]}",
                template=template,
                sandbox=sandbox,
                metadata=dict(metadata or {}),
                env=dict(env or {}),
                started_at=now,
                end_at=now + lifetime,
            )
            with self._lock:
                if self._closed:
                    raise SweflowError("the endpoint is shutting down")
                self._live[live.id] = live
        except BaseException:
            sandbox.close()
            raise
        return live

    def get(self, sandbox_id: str) -> Live:
        with self._lock:
            live = self._live.get(sandbox_id)
        if live is None or live.end_at <= time.time():
            raise UnknownSandbox(_not_found(sandbox_id))
        return live

    def listed(self) -> list[Live]:
        now = time.time()
        with self._lock:
            return [live for live in self._live.values() if live.end_at > now]

    def set_timeout(
        self, sandbox_id: str, timeout: int | None, *, extend_only: bool = False
    ) -> Live:
        """A new deadline ``timeout`` seconds from now (a connect only ever extends it)."""
        live = self.get(sandbox_id)
        end_at = time.time() + _clamp(timeout)
        live.end_at = max(live.end_at, end_at) if extend_only else end_at
        return live

    def kill(self, sandbox_id: str) -> None:
        with self._lock:
            live = self._live.pop(sandbox_id, None)
        if live is None:
            raise UnknownSandbox(_not_found(sandbox_id))
        live.sandbox.close()

    def reap(self) -> list[str]:
        """Close the sandboxes past their deadline; their ids."""
        now = time.time()
        with self._lock:
            gone = [live for live in self._live.values() if live.end_at <= now]
            for live in gone:
                del self._live[live.id]
        for live in gone:
            live.sandbox.close()
        return [live.id for live in gone]

    def close_all(self) -> None:
        """Close every sandbox; a create still opening one closes it itself."""
        with self._lock:
            self._closed = True
            gone, self._live = list(self._live.values()), {}
        for live in gone:
            live.sandbox.close()


def _not_found(sandbox_id: str) -> str:
    # "was not found" is what the e2b SDK reads as "the sandbox is gone" (not unreachable)
    return f"sandbox {sandbox_id!r} was not found (killed, past its timeout, or never created)"


def _clamp(timeout: int | None) -> float:
    if timeout is None:
        return DEFAULT_TIMEOUT_S
    if timeout <= 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
    return min(timeout, MAX_TIMEOUT_S)
