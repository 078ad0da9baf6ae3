"""A real multi-node Ray cluster on this machine, for tests and benchmarks.

Each node is a ``sweflow ray start`` process (``ray start --block``) with its own layer store,
slots and name, on loopback; stopping a node sends SIGTERM to that process (its PID), which
takes the node's Ray processes down with it; killing it sends SIGKILL to its process group, as
a machine that dies would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from sweflow.errors import SweflowError
from sweflow.ports import free_port

START_TIMEOUT_S = 90.0


@dataclass
class LocalNode:
    name: str
    store: Path
    process: subprocess.Popen

    def kill(self) -> None:
        """The node dies: SIGKILL to its process group (``ray start``, raylet, workers, their
        sandboxes), led by its PID."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        """SIGTERM to the node's ``ray start`` process (its Ray processes stop with it)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@dataclass
class LocalCluster:
    """Nodes started with :meth:`add_node`; the first is the head."""

    root: Path
    port: int = field(default_factory=free_port)
    nodes: list[LocalNode] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def add_node(
        self, name: str, slots: int, cpus: int = 1, store: Path | None = None
    ) -> LocalNode:
        """Start a node named ``name`` with its own store (default: under ``root``); waits until
        it joins."""
        store = store or self.root / f"store-{name}"
        command = [
            sys.executable,
            "-m",
            "sweflow.cli",
            "ray",
            "start",
            "--store",
            str(store),
            "--slots",
            str(slots),
            "--cpus",
            str(cpus),
            "--name",
            name,
            "--node-ip",
            "127.0.0.1",
        ]
        if self.nodes:
            command += ["--address", self.address]
        else:
            command += [
                "--port",
                str(self.port),
                "--no-dashboard",
                "--temp-dir",
                str(self.root / "ray"),
            ]
        log = open(self.root / f"node-{name}.log", "w")  # noqa: SIM115 - the node's lifetime
        # a loopback cluster of this machine's own processes: no token auth, which `ray start`
        # turns on when ~/.ray/auth_token exists while a driver's default stays off
        env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        node = LocalNode(name, store, process)
        self.nodes.append(node)
        self._wait_for(len(self.nodes), log.name)
        return node

    def _wait_for(self, count: int, log: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.nodes[-1].process.poll() is not None:
                raise SweflowError(f"ray node exited at start; see {log}")
            if self.alive_nodes() >= count:
                return
            time.sleep(0.5)
        raise SweflowError(f"the Ray cluster did not reach {count} nodes; see {log}")

    def alive_nodes(self) -> int:
        """How many nodes the head counts alive (asked from a short-lived driver)."""
        done = subprocess.run(
            [sys.executable, "-c", _COUNT_NODES, self.address],
            capture_output=True,
            text=True,
            timeout=60,
        )
        return int(done.stdout.strip() or 0) if done.returncode == 0 else 0

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


_COUNT_NODES = """
import sys
import ray
ray.init(address=sys.argv[1], log_to_driver=False, logging_level="ERROR")
print(sum(1 for node in ray.nodes() if node["Alive"]))
"""
