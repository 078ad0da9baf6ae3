"""A scripted OpenAI-compatible chat server: deterministic replies, a fixed latency.

It stands in for a model where the point is the agent's side: the success path in tests (it
replays a known fix through the tools) and the fixed-latency endpoint of the agent benchmark.
It is a real HTTP server in its own process (``python -m sweflow.testing.scripted_model
SCRIPT``), so the client, the retries and the event loop are exercised as against vLLM.

A script (JSON): ``{"scripts": [{"match": TEXT, "turns": [TURN, ...]}], "default": [TURN, ...]}``.
The conversation whose first user message contains ``match`` gets that script's turns, others
the default ones; the reply is turn number N, N being the number of assistant messages already
in the request (the last turn repeats), so the server keeps no state and survives restarts.
A TURN is ``{"content": TEXT, "tool_calls": [{"name": TOOL, "arguments": {...}}]}``. With
``"max_prompt_tokens": N`` a longer conversation is refused as vLLM refuses one (HTTP 400).

Sampling: a script entry may give ``"samples": [[TURN, ...], [TURN, ...]]`` instead of
``"turns"``: a request at a temperature above 0 with a ``seed`` gets variant ``seed % len``, one
at temperature 0 (greedy) or without a seed the first, so the samples of a task differ as a
served model's would, and repeat with their seeds. A request with ``logprobs`` gets each word
and mark of the reply as a token of logprob 0; a turn's ``"top_logprobs": {TOKEN: LOGPROB}``
are the alternatives offered at the first token that is one of them (a verifier's YES and NO).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from sweflow.errors import SweflowError

READY = "READY"


def tool_turn(name: str, **arguments: Any) -> dict[str, Any]:
    """A scripted turn that calls one tool."""
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def gold_replay(instances: list[Any]) -> dict[str, Any]:
    """A text-mode script in which each instance's run applies its gold patch and submits.

    The success path of every stage that follows a model (collect keeps the runs, infer's
    predictions resolve) without a model that can solve anything.
    """
    scripts = [
        {
            "match": instance.problem_statement,
            "turns": [
                {"content": "THOUGHT: look first.\n\n```bash\ngit status --short\n```"},
                {"content": f"THOUGHT: fix.\n\n```bash\n{_heredoc_apply(instance.patch)}\n```"},
                {"content": "THOUGHT: done.\n\n```bash\nsubmit\n```"},
            ],
        }
        for instance in instances
    ]
    return {"scripts": scripts, "default": [{"content": "```bash\nsubmit\n```"}]}


def _heredoc_apply(patch: str) -> str:
    return f"git apply <<'EOF'\n{patch}EOF"


def pick_turn(
    script: dict[str, Any], messages: list[dict[str, Any]], body: dict[str, Any] | None = None
) -> tuple[int, dict]:
    """(turn index, turn) answering this conversation (``body``: the request's sampling)."""
    first_user = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
    turns = script.get("default") or [{"content": "```bash\nsubmit\n```"}]
    for entry in script.get("scripts", []):
        if entry["match"] in first_user:
            turns = entry["turns"] if "turns" in entry else _variant(entry["samples"], body or {})
            break
    index = sum(1 for m in messages if m.get("role") == "assistant")
    return index, turns[min(index, len(turns) - 1)]


def _variant(samples: list[list[dict]], body: dict[str, Any]) -> list[dict]:
    """The turns a sampled request gets: by its seed above temperature 0, else the first."""
    seed, temperature = body.get("seed"), body.get("temperature") or 0
    return samples[seed % len(samples)] if seed is not None and temperature > 0 else samples[0]


TOKENS = re.compile(r"\w+|[^\w\s]|\s+")


def logprobs_of(turn: dict[str, Any]) -> dict[str, Any]:
    """The reply's tokens (words, marks and spaces) at logprob 0, the turn's ``top_logprobs``
    offered at the first token among them."""
    offered = turn.get("top_logprobs") or {}
    content, placed = [], False
    for token in TOKENS.findall(turn.get("content") or ""):
        if token in offered and not placed:
            placed, logprob = True, offered[token]
            top = [{"token": t, "logprob": lp, "bytes": None} for t, lp in offered.items()]
        else:
            logprob, top = 0.0, [{"token": token, "logprob": 0.0, "bytes": None}]
        content.append({"token": token, "logprob": logprob, "bytes": None, "top_logprobs": top})
    return {"content": content}


def completion(
    model: str, index: int, turn: dict[str, Any], prompt_chars: int, logprobs: bool = False
) -> dict:
    """A chat.completion object for ``turn`` (token counts: ~4 characters a token)."""
    message: dict[str, Any] = {"role": "assistant", "content": turn.get("content")}
    calls = [
        {
            "id": f"call_{index}_{i}",
            "type": "function",
            "function": {"name": c["name"], "arguments": json.dumps(c.get("arguments", {}))},
        }
        for i, c in enumerate(turn.get("tool_calls") or [])
    ]
    if calls:
        message["tool_calls"] = calls
    out_chars = len(json.dumps(message))
    return {
        "id": f"chatcmpl-scripted-{index}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if calls else "stop",
                "logprobs": logprobs_of(turn) if logprobs else None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_chars // 4,
            "completion_tokens": out_chars // 4,
            "total_tokens": (prompt_chars + out_chars) // 4,
        },
    }


def make_handler(script: dict[str, Any], latency_s: float) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as clients expect from vLLM
        disable_nagle_algorithm = True  # headers and body go out as two writes: no 40 ms stall

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/") in ("/health", "/v1/health"):
                self._send(200, {"status": "ok"})
            elif self.path.rstrip("/") == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or "{}")
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            messages = body.get("messages", [])
            index, turn = pick_turn(script, messages, body)
            time.sleep(latency_s)
            chars = sum(len(json.dumps(m)) for m in messages)
            limit = script.get("max_prompt_tokens")
            if limit is not None and chars // 4 > limit:
                message = f"This model's maximum context length is {limit} tokens. However, "
                message += f"your request has {chars // 4} input tokens."
                self._send(400, {"error": {"message": message, "type": "BadRequestError"}})
                return
            model = body.get("model", "scripted")
            self._send(200, completion(model, index, turn, chars, bool(body.get("logprobs"))))

    return Handler


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # a batch opens dozens of connections at once

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-reply (a stopped run) is no error of the server's."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def serve(script_path: Path, host: str, port: int, latency_s: float) -> None:
    script = json.loads(Path(script_path).read_text())
    server = Server((host, port), make_handler(script, latency_s))
    print(f"{READY} http://{host}:{server.server_address[1]}/v1", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server.serve_forever()


@contextlib.contextmanager
def scripted_endpoint(
    script_path: Path, *, port: int = 0, latency_s: float = 0.0, host: str = "127.0.0.1"
) -> Iterator[tuple[str, subprocess.Popen]]:
    """Start the server in a child process; yields (base URL, process); stops it by its PID."""
    argv = [sys.executable, "-m", "sweflow.testing.scripted_model", str(script_path)]
    argv += ["--host", host, "--port", str(port), "--latency-s", str(latency_s)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env={**os.environ})
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith(READY):
            raise SweflowError(f"the scripted server did not start (exit {proc.poll()})")
        yield line.split()[1], proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("script", type=Path)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency-s", type=float, default=0.0)
    args = parser.parse_args()
    serve(args.script, args.host, args.port, args.latency_s)


if __name__ == "__main__":
    main()
