"""The rows of a data source: a local file, or a Hugging Face dataset read through ``datasets``.

A Hub dataset is read offline from the Hugging Face cache when it is there (no request at all),
and downloaded otherwise, unless ``HF_HUB_OFFLINE`` is set, in which case an uncached dataset is
an error naming it. A row that is not a JSON object (a bad line of a file) comes back as a
:class:`BadRow` carrying why, so that the report counts it.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweflow.errors import ConfigError
from sweflow.training.sft.sources.spec import DataSource


class SourceError(ConfigError):
    """A source that cannot be read at all; the message names it."""


@dataclass(frozen=True)
class BadRow:
    where: str
    why: str


def rows(source: DataSource, path: Path | None = None) -> Iterator[dict[str, Any] | BadRow]:
    """Every row of ``source`` (``path``: the file it names, resolved by the caller)."""
    if (hub := source.hub()) is not None and path is None:
        yield from _hub_rows(*hub)
        return
    file = path or Path(source.source)
    if not file.is_file():
        raise SourceError(f"{source.source}: no such file")
    if file.suffix == ".parquet":
        import pyarrow.parquet as pq

        yield from pq.read_table(file).to_pylist()
    elif file.suffix == ".json":
        data = json.loads(file.read_text())
        yield from (data if isinstance(data, list) else [data])
    else:
        with file.open() as fh:
            for number, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    yield BadRow(f"line {number}", f"not JSON ({exc.msg})")
                    continue
                yield row if isinstance(row, dict) else BadRow(f"line {number}", "not an object")


@contextlib.contextmanager
def _offline(on: bool) -> Iterator[None]:
    """``datasets`` and ``huggingface_hub`` kept from the network while reading the cache."""
    import datasets
    import huggingface_hub.constants as hub

    before = datasets.config.HF_HUB_OFFLINE, hub.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = hub.HF_HUB_OFFLINE = on or before[0]
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, hub.HF_HUB_OFFLINE = before


def _hub_rows(name: str, revision: str | None, split: str | None) -> Iterator[dict[str, Any]]:
    from datasets import load_dataset

    label = name + (f"@{revision}" if revision else "") + (f":{split}" if split else "")
    try:
        with _offline(True):
            data = load_dataset(name, split=split, revision=revision)
    except Exception as cached_miss:  # not in the cache (datasets raises several kinds)
        if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
            raise SourceError(
                f"{label}: not in the Hugging Face cache and HF_HUB_OFFLINE is set "
                f"({type(cached_miss).__name__}: {cached_miss})"
            ) from None
        try:
            data = load_dataset(name, split=split, revision=revision)
        except Exception as exc:
            raise SourceError(f"{label}: cannot load it: {exc}") from None
    if hasattr(data, "keys"):  # a DatasetDict: no split named
        splits = list(data.keys())
        if len(splits) != 1:
            raise SourceError(
                f"{label}: name one of its splits ({', '.join(splits)}): {name}:SPLIT"
            )
        data = data[splits[0]]
    yield from data
