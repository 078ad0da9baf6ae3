"""How `sweflow serve` starts vLLM: flags, tool-call parser by model family, early errors."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sweflow.cli import app
from sweflow.ports import free_port
from sweflow.sandbox.procs import children_of, group_members
from sweflow.serving import ServeConfig, ServeError, tool_parser_for, vllm_command, vllm_server


def model_folder(root: Path, model_type: str, template: str) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"model_type": model_type}))
    (root / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    return root


def test_tool_parser_follows_the_family_and_the_template(tmp_path: Path) -> None:
    tools = "{% if tools %}<tools>{{ tools }}</tools>{% endif %}{{ messages }}"
    plain = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    assert tool_parser_for(model_folder(tmp_path / "qwen", "qwen2", tools)) == "hermes"
    assert tool_parser_for(model_folder(tmp_path / "llama", "llama", tools)) == "llama3_json"
    assert tool_parser_for(model_folder(tmp_path / "smol", "llama", plain)) is None
    assert tool_parser_for(model_folder(tmp_path / "gpt2", "gpt2", tools)) is None


def test_command_line_on_cpu_and_gpu(tmp_path: Path) -> None:
    qwen = model_folder(tmp_path / "qwen", "qwen3", "{{ tools }}")
    cfg = ServeConfig(model=qwen, served_name="q", port=8123, max_model_len=2048, python="py")
    argv, env = vllm_command(cfg, gpu=False)
    assert argv[:3] == ["py", "-m", "vllm.entrypoints.openai.api_server"]
    joined = " ".join(argv)
    assert f"--model {qwen} --served-model-name q" in joined
    assert "--port 8123" in joined and "--max-model-len 2048" in joined
    assert "--enable-auto-tool-choice --tool-call-parser hermes" in joined
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert "--enforce-eager" in argv  # compile auto: off on a CPU
    argv, env = vllm_command(cfg.model_copy(update={"tool_parser": None}), gpu=True)
    assert "--tool-call-parser" not in argv and "--enforce-eager" not in argv
    assert env.get("VLLM_CPU_KVCACHE_SPACE") == os.environ.get("VLLM_CPU_KVCACHE_SPACE")
    assert cfg.base_url == "http://127.0.0.1:8123/v1"


def test_compile_on_or_off_is_what_is_asked_whatever_the_device(tmp_path: Path) -> None:
    cfg = ServeConfig(model=model_folder(tmp_path / "m", "llama", ""), python="py")
    off, on = (cfg.model_copy(update={"compile": mode}) for mode in ("off", "on"))
    for gpu in (False, True):
        assert "--enforce-eager" in vllm_command(off, gpu)[0]
        assert "--enforce-eager" not in vllm_command(on, gpu)[0]


def test_a_folder_that_is_no_model_fails_before_starting(tmp_path: Path) -> None:
    with pytest.raises(ServeError, match="no config.json"):
        with vllm_server(ServeConfig(model=tmp_path), tmp_path / "log"):
            pass


def test_server_that_exits_early_reports_its_log(tmp_path: Path) -> None:
    folder = model_folder(tmp_path / "m", "llama", "")
    # an interpreter that cannot run vLLM's module: the launcher sees it exit and says why
    cfg = ServeConfig(model=folder, port=1, python="/bin/false", ready_timeout_s=60)
    with pytest.raises(ServeError, match="exited with 1 before it was healthy"):
        with vllm_server(cfg, tmp_path / "serve.log"):
            pass


# A stand-in for vLLM's server, started as vLLM is (`PYTHON -m ENTRY --port N ...`): it answers
# /health, keeps a shared-memory segment and an engine child, puts a socket where vLLM puts its
# ZeroMQ sockets, and ignores SIGTERM (a graceful stop would wait out its whole grace).
STUCK_SERVER = """\
import http.server, os, signal, socket, sys
from multiprocessing import resource_tracker, shared_memory
signal.signal(signal.SIGTERM, signal.SIG_IGN)
segment = shared_memory.SharedMemory(create=True, size=1 << 20)
resource_tracker.unregister(segment._name, "shared_memory")  # as a SIGKILL leaves it
open(os.environ["SEGMENT_NOTE"], "w").write(segment._name)
socket.socket(socket.AF_UNIX).bind(os.path.join(os.environ["VLLM_RPC_BASE_PATH"], "engine"))
if os.fork() == 0:
    signal.pause()
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
port = int(sys.argv[sys.argv.index("--port") + 1])
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


def test_a_failed_block_kills_the_server_at_once_and_leaves_nothing(tmp_path: Path) -> None:
    """The block around a server fails (an interrupt, a failed RL step): its process group is
    killed without the graceful shutdown, and the shared memory and sockets it made are gone."""
    server = tmp_path / "python"
    server.write_text(f"#!{sys.executable}\n{STUCK_SERVER}")
    server.chmod(0o755)
    note = tmp_path / "segment"
    cfg = ServeConfig(
        model=model_folder(tmp_path / "m", "llama", ""),
        port=free_port(),
        python=str(server),
        env={"SEGMENT_NOTE": str(note)},
    )
    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        with vllm_server(cfg, tmp_path / "serve.log"):
            (pid,) = [
                child
                for child, _ in children_of(os.getpid())  # the group's leader
                if str(server) in _cmdline(child)
            ]
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            sockets = Path(
                next(v for v in environ if v.startswith(b"VLLM_RPC_BASE_PATH="))
                .split(b"=", 1)[1]
                .decode()
            )
            segment = Path("/dev/shm") / note.read_text().lstrip("/")
            assert segment.exists() and (sockets / "engine").exists()
            assert len(group_members(pid)) >= 2  # the server and its engine
            raise KeyboardInterrupt
    assert time.monotonic() - began < 20, "it waited for a graceful stop (a 30 s grace)"
    assert not group_members(pid)
    assert not segment.exists() and not sockets.exists()


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:  # it ended meanwhile
        return ""


def test_model_prepare_rejects_unknown_names(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["model", "prepare", "gpt-5", "--out", str(tmp_path / "m")])
    assert result.exit_code == 2 and "unknown model 'gpt-5'" in result.output


def test_models_resolve_from_a_folder_or_the_hub_cache_offline(tmp_path, monkeypatch) -> None:
    """A Hub id is resolved by huggingface_hub from its cache (no network with HF_HUB_OFFLINE):
    the snapshot of the main ref, or of a pinned revision."""
    from sweflow.serving import ModelPrepareError, resolve_model

    cache = tmp_path / "hub"
    repo = cache / "models--acme--tiny-coder"
    for commit, note in (("a" * 40, "main"), ("b" * 40, "pinned")):
        snapshot = repo / "snapshots" / commit
        snapshot.mkdir(parents=True)
        (snapshot / "config.json").write_text(json.dumps({"model_type": "llama", "note": note}))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    main = resolve_model("acme/tiny-coder")
    assert json.loads((main / "config.json").read_text())["note"] == "main"
    pinned = resolve_model(f"acme/tiny-coder@{'b' * 40}")
    assert json.loads((pinned / "config.json").read_text())["note"] == "pinned"
    assert resolve_model(main) == main  # a folder is itself
    with pytest.raises(ModelPrepareError, match="acme/missing@main: HF_HUB_OFFLINE is set"):
        resolve_model("acme/missing")
    with pytest.raises(ModelPrepareError, match="not a Hugging Face folder"):
        resolve_model("no such thing")
