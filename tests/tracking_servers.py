"""The trackers the tracking tests read back: a real MLflow tracking server on loopback,
started from its own venv (.venv-mlflow, scripts/setup-mlflow.sh) and stopped by its PID, and
W&B's offline run folders, read record by record.

W&B keeps an offline run's history only in its ``run-<id>.wandb`` file: a LevelDB log (a
7-byte file header ``:W&B``, magic, version; then 32 KiB blocks of chunks, each a 7-byte
header: CRC32, length, type FULL/FIRST/MIDDLE/LAST) of ``wandb_internal_pb2.Record``
messages. The wandb package ships the message types but no reader any more.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import struct
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from sweflow.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
BLOCK, HEADER = 32768, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def mlflow_server_python() -> Path:
    """The MLflow server's interpreter (SWEFLOW_MLFLOW_PYTHON, else .venv-mlflow); skips the
    test, saying how to make it, when there is none."""
    named = os.environ.get("SWEFLOW_MLFLOW_PYTHON")
    python = Path(named) if named else ROOT / ".venv-mlflow" / "bin" / "python"
    if not python.is_file():
        pytest.skip(f"no MLflow server: {python} is missing (bash scripts/setup-mlflow.sh)")
    return python


@contextlib.contextmanager
def mlflow_server(folder: Path) -> Iterator[str]:
    """``mlflow server`` on a free loopback port, its runs in a SQLite file and its artifacts
    in ``folder``; yields its URI once /health answers; stopped by its PID (its group)."""
    port = free_port()
    log = (folder / "server.log").open("w")
    command = [
        str(mlflow_server_python()),
        "-m",
        "mlflow",
        "server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        "--backend-store-uri",
        f"sqlite:///{folder / 'mlflow.db'}",
        "--artifacts-destination",
        str(folder / "artifacts"),
    ]
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600  # minutes on a loaded 2-core machine
        while True:
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{uri}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"mlflow server did not start: {(folder / 'server.log').read_text()[-2000:]}"
                )
            time.sleep(1)
        yield uri
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


@pytest.fixture(autouse=True)
def offline_wandb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test of a module that imports it: W&B offline (``wandb_offline``)."""
    return wandb_offline(tmp_path / "wandb-home", monkeypatch)


def wandb_offline(home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """W&B never reaches the network: offline, no key, every folder of its own in ``home``;
    no MLflow run is preset either."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    for name in ("WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_CONFIG_DIR"):
        monkeypatch.setenv(name, str(home / name.lower()))
    for name in ("WANDB_API_KEY", "WANDB_BASE_URL", "MLFLOW_RUN_ID", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(home / "no-netrc"))
    return home


def wandb_records(path: Path) -> Iterator[object]:
    """The records of a ``.wandb`` file, in order."""
    from wandb.proto.wandb_internal_pb2 import Record

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is no W&B log"
    offset, parts = HEADER, b""
    while offset + HEADER <= len(data):
        if BLOCK - offset % BLOCK < HEADER:  # a block's trailer: too short for a chunk header
            offset += BLOCK - offset % BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[offset : offset + HEADER])
        chunk = data[offset + HEADER : offset + HEADER + length]
        offset += HEADER + length
        if kind == 0 and length == 0:  # zero padding at the end
            break
        parts = chunk if kind in (FULL, FIRST) else parts + chunk
        if kind in (FULL, LAST):
            record = Record()
            record.ParseFromString(parts)
            yield record


def finished_records(folder: Path, timeout: float = 60) -> list[object]:
    """The records of a finished run folder: W&B's service may still be writing the file when
    ``finish()`` returns (seen on a loaded machine: the last rows and the exit record came
    later), so read until it ends with its exit record."""
    deadline = time.monotonic() + timeout
    while True:
        records = list(wandb_records(next(folder.glob("run-*.wandb"))))
        if records and records[-1].WhichOneof("record_type") == "exit":
            return records
        assert time.monotonic() < deadline, f"{folder}: the run never wrote its exit record"
        time.sleep(1)


def wandb_history(folders: list[Path]) -> list[dict]:
    """Every ``run.log`` row of an offline run's folders (in their order), values decoded."""
    rows = []
    for folder in folders:
        for record in finished_records(folder):
            if record.WhichOneof("record_type") == "history":
                rows.append(
                    {
                        item.key or "/".join(item.nested_key): json.loads(item.value_json)
                        for item in record.history.item
                    }
                )
    return rows


def wandb_config(folders: list[Path]) -> dict:
    """The run's config as its folders recorded it (later updates win)."""
    config = {}
    for folder in folders:
        for record in finished_records(folder):
            if record.WhichOneof("record_type") == "config":
                for item in record.config.update:
                    config[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    return config
