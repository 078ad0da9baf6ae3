"""The Sandbox protocol every backend implements, and its result type.

Backends implement the synchronous methods; the async ones run them in a worker thread so that
an asyncio agent loop can keep hundreds of sandboxes busy without blocking its event loop.
"""

from __future__ import annotations

import asyncio
import shlex
from abc import ABC, abstractmethod
from dataclasses import dataclass
from types import TracebackType
from typing import ClassVar

from sweflow.registered import load_named
from sweflow.sandbox.backends import BACKENDS
from sweflow.sandbox.errors import SandboxConfigError, SandboxFileError
from sweflow.sandbox.spec import SandboxSpec


@dataclass(frozen=True)
class ExecResult:
    """The outcome of one command: merged stdout+stderr, decoded leniently."""

    exit_code: int
    output: str
    timed_out: bool = False
    truncated: bool = False
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


DIFF_MAX_BYTES = 256 << 20  # a diff is never cut: a truncated patch would not apply
TIMEOUT_EXIT_CODE = 124  # what coreutils' timeout(1) returns, so scripts read it the same way


def require_absolute(path: str) -> None:
    """Sandbox paths are absolute (a relative one would depend on the backend's cwd)."""
    if not path.startswith("/"):
        raise SandboxConfigError(f"sandbox paths must be absolute, got {path!r}")


def require_file_path(path: str) -> None:
    """What write() may create: an absolute path whose last part names a file."""
    require_absolute(path)
    name = path.rstrip("/").rpartition("/")[2]
    if path.endswith("/") or name in ("", ".", ".."):
        raise SandboxFileError(f"cannot write {path} in the sandbox: not a file path")


def wrap_command(cmd: str, cwd: str | None, env: dict[str, str] | None) -> str:
    """Run ``cmd`` with a one-off cwd/env in a subshell, so the persistent shell keeps its own."""
    if not cwd and not env:
        return cmd
    parts = []
    if cwd:
        parts.append(f"cd -- {shlex.quote(cwd)} || exit 1")
    for key, value in (env or {}).items():
        if not key.isidentifier():
            raise SandboxConfigError(f"invalid environment variable name {key!r}")
        parts.append(f"export {key}={shlex.quote(value)}")
    parts.append(f"eval {shlex.quote(cmd)}")
    return "(" + "\n".join(parts) + "\n)"


DIFF_INDEX = "/tmp/.sweflow-diff-index"


def diff_command(
    workdir: str, base: str, exclude: list[str] | None, index: str = DIFF_INDEX
) -> str:
    """Shell that prints the workdir repo's diff against ``base``, new files included.

    A throwaway index (the file ``index``) keeps the agent's own index untouched; with
    ``exclude`` None it prints the NUL-separated numstat instead, which is how binary files are
    found.
    """
    index = shlex.quote(index)
    head = (
        f"cd -- {shlex.quote(workdir)} && rm -f {index} && "
        f"(cp .git/index {index} 2>/dev/null || true) && "
        f"GIT_INDEX_FILE={index} git add -A . >/dev/null 2>&1 && "
    )
    if exclude is None:
        body = f"GIT_INDEX_FILE={index} git diff --cached --numstat -z {shlex.quote(base)}"
    else:
        paths = " ".join(shlex.quote(f":(exclude,literal){p}") for p in exclude)
        body = (
            f"GIT_INDEX_FILE={index} git -c core.quotepath=off diff --cached "
            f"{shlex.quote(base)} -- . {paths}"
        )
    return head + body + f"; rc=$?; rm -f {index}; exit $rc"


def binary_paths(numstat_z: str) -> list[str]:
    """Paths git reports as binary (``-\\t-\\t``) in ``git diff --numstat -z`` output."""
    paths: list[str] = []
    fields = numstat_z.split("\0")
    i = 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if not entry:
            continue
        added, _, rest = entry.partition("\t")
        deleted, _, path = rest.partition("\t")
        if not path:  # a rename: the two paths follow as separate fields
            path = fields[i + 1] if i + 1 < len(fields) else ""
            i += 2
        if added == "-" and deleted == "-":
            paths.append(path)
    return paths


class Sandbox(ABC):
    """One isolated environment: a shell whose state persists between exec() calls."""

    spec: SandboxSpec
    # Whether the code inside is kept from the host (its files, processes, network): what a
    # hostile patch's run needs (RL refuses a backend that does not).
    isolated: ClassVar[bool] = True
    diff_index: str = DIFF_INDEX  # the throwaway git index diff() uses, a file in the sandbox
    _closed: bool = False  # every backend's close() sets it

    @property
    def closed(self) -> bool:
        """Whether close() has run: the sandbox holds nothing of the host's any more."""
        return self._closed

    @abstractmethod
    def exec(
        self,
        cmd: str,
        timeout: float | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        *,
        max_output: int | None = None,
    ) -> ExecResult:
        """Run ``cmd`` in the sandbox's shell; kills what it started if it runs past ``timeout``.

        ``timeout`` defaults to ``spec.limits.wall_time_s`` and ``max_output`` to
        ``spec.limits.output_bytes``; ``cwd``/``env`` apply to this command only.
        """

    @abstractmethod
    def read(self, path: str) -> bytes:
        """Bytes of a file inside the sandbox (symlinks resolve inside, never to the host)."""

    @abstractmethod
    def write(self, path: str, data: bytes | str) -> None:
        """Create or replace a file inside the sandbox, creating parent directories."""

    @abstractmethod
    def close(self) -> None:
        """Tear down everything the sandbox made; safe to call twice."""

    @classmethod
    def collect_garbage(cls) -> dict[str, int]:
        """Remove what this backend's crashed owners left behind; returns {what: count}.

        ``sweflow sandbox gc`` calls it on every registered backend. Live sandboxes (of this or
        another process) are never touched. A backend that leaves nothing keeps this default.
        """
        return {}

    def terminal(self) -> int:
        """Run an interactive shell inside on the caller's terminal; returns its exit status."""
        raise SandboxConfigError(f"{type(self).__name__} has no interactive terminal")

    def diff(self) -> str:
        """Unified git diff of the workdir repository against ``spec.repo_base``.

        New files are included; binary files are left out, since a text patch cannot carry them.
        """
        workdir, base = self.spec.workdir, self.spec.repo_base
        index = self.diff_index
        numstat = self._checked(diff_command(workdir, base, None, index), "list changed files")
        patch = self._checked(diff_command(workdir, base, binary_paths(numstat), index), "diff")
        return patch

    def _checked(self, cmd: str, what: str) -> str:
        result = self.exec(cmd, max_output=DIFF_MAX_BYTES)
        if not result.ok:
            raise SandboxFileError(f"{what} in {self.spec.workdir} failed: {result.output[-2000:]}")
        return result.output

    # -- context manager and asyncio -------------------------------------------------------
    def __enter__(self) -> Sandbox:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.close)

    async def aexec(
        self,
        cmd: str,
        timeout: float | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        return await asyncio.to_thread(self.exec, cmd, timeout, env, cwd)

    async def aread(self, path: str) -> bytes:
        return await asyncio.to_thread(self.read, path)

    async def awrite(self, path: str, data: bytes | str) -> None:
        await asyncio.to_thread(self.write, path, data)

    async def adiff(self) -> str:
        return await asyncio.to_thread(self.diff)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)


def backend_class(name: str) -> type[Sandbox]:
    """The Sandbox class of a registered backend name or a dotted path, imported now."""
    cls = load_named("sandbox backend", name, BACKENDS, SandboxConfigError)
    if not (isinstance(cls, type) and issubclass(cls, Sandbox)):
        raise SandboxConfigError(f"sandbox backend {name!r} is not a Sandbox class")
    return cls
