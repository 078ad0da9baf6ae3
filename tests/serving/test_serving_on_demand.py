"""A model server started on first use (sweflow.serving.ServedOnDemand), as the pipeline's agent
stages and the learning benchmark use it: nothing starts until something asks, one server starts
however many threads ask at once, and it is stopped when its block ends.

vLLM takes minutes to start on a CPU, so the server here is a stand-in in its own process that
answers vLLM's ``/health`` on the port it is given; the launcher around it (the command line,
the health wait, the stop by PID) is the real one.
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sweflow.pipeline.model_servers import ModelServers
from sweflow.pipeline.sections import AgentSection, ModelSection
from sweflow.ports import free_port
from sweflow.sandbox.procs import running
from sweflow.serving import ServeConfig, ServedOnDemand
from sweflow.serving.vllm import healthy

FAKE_SERVER = """
import os, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Health(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass

with open(os.environ["FAKE_VLLM_STARTS"], "a") as starts:
    starts.write(f"{os.getpid()}\\n")
port = int(sys.argv[sys.argv.index("--port") + 1])
ThreadingHTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


def fake_vllm(tmp_path: Path, monkeypatch) -> tuple[str, Path, Path]:
    """(an interpreter that runs the stand-in for ``-m vllm...``, the file each start writes
    its PID to, a model folder)."""
    server = tmp_path / "fake_vllm.py"
    server.write_text(FAKE_SERVER)
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nshift 2\nexec {sys.executable} {server} "$@"\n')
    python.chmod(0o755)
    starts = tmp_path / "starts"
    monkeypatch.setenv("FAKE_VLLM_STARTS", str(starts))
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "fake"}))
    return str(python), starts, model


def test_a_server_starts_once_when_first_asked_and_stops_with_its_block(
    tmp_path, monkeypatch
) -> None:
    python, starts, model = fake_vllm(tmp_path, monkeypatch)
    made: list[int] = []

    def config() -> ServeConfig:
        made.append(1)
        return ServeConfig(model=model, port=free_port(), python=python, ready_timeout_s=60)

    with ServedOnDemand(config, tmp_path / "logs" / "vllm.log") as server:
        assert made == [] and not starts.exists()  # nothing asked: nothing made or started
        with ThreadPoolExecutor(4) as pool:
            urls = set(pool.map(lambda _: server.get().base_url, range(4)))
        assert len(urls) == 1 and len(made) == 1, (urls, made)
        (pid,) = map(int, starts.read_text().split())
        assert healthy(urls.pop())
    assert not running(pid)


def test_the_pipeline_serves_a_model_once_for_every_stage_that_asks(tmp_path, monkeypatch):
    python, starts, model = fake_vllm(tmp_path, monkeypatch)
    monkeypatch.setenv("SWEFLOW_SERVE_PYTHON", python)
    section = ModelSection(source=str(model), name="m", startup_timeout_s=60)
    servers = ModelServers()
    try:
        assert not starts.exists()
        collect, mode = servers.endpoint(section, AgentSection(), tmp_path)
        infer, _ = servers.endpoint(section, AgentSection(), tmp_path)
        assert collect.base_url == infer.base_url and collect.model == "m" and mode == "text"
        (pid,) = map(int, starts.read_text().split())
    finally:
        servers.close()
    assert not running(pid)
