"""A dataset named by its Hugging Face id: ``org/name[@revision][:split]``.

The CLI's ``-d``, the pipeline's ``dataset.path`` and the benchmarks take the same text. The
dataset's files come through huggingface_hub's cache: from the cache alone when they are there
(no network, the same bits as last time), else downloaded once into it; the rows are then read
from that local snapshot by ``datasets`` like any folder of data files. A dry run asks
:func:`hub_status` instead, which never downloads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sweflow.instances.record import InstancesError

_HUB_ID = re.compile(
    r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?:@(?P<revision>[\w./-]+?))?(?::(?P<split>[\w.-]+))?$"
)


_FILE_SUFFIXES = (".json", ".jsonl", ".ndjson", ".parquet", ".csv", ".yaml", ".yml")


@dataclass(frozen=True)
class HubName:
    """A Hugging Face dataset id, the revision (branch, tag or commit) and split it names."""

    repo_id: str
    revision: str | None = None
    split: str | None = None

    def __str__(self) -> str:
        text = self.repo_id + (f"@{self.revision}" if self.revision else "")
        return text + (f":{self.split}" if self.split else "")


def parse_hub_name(text: str) -> HubName | None:
    """``text`` as a Hub id, or None when it does not read as one (a data file's name, e.g.
    ``data/tasks.jsonl``, is a path that does not exist, not an id)."""
    match = _HUB_ID.fullmatch(text.strip())
    if match is None or match["repo"].lower().endswith(_FILE_SUFFIXES):
        return None
    return HubName(match["repo"], match["revision"], match["split"])


def cached_snapshot(name: HubName) -> Path | None:
    """The local snapshot of ``name`` in the Hugging Face cache, or None: reads no network."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = snapshot_download(
            name.repo_id, repo_type="dataset", revision=name.revision, local_files_only=True
        )
    except (LocalEntryNotFoundError, FileNotFoundError, ValueError):
        return None
    return Path(folder)


def hub_dataset_folder(name: HubName) -> Path:
    """The local folder of ``name``'s files: the cached snapshot, else a download into the
    cache. InstancesError names the id and what to do when neither works."""
    cached = cached_snapshot(name)
    if cached is not None:
        return cached
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    try:
        return Path(snapshot_download(name.repo_id, repo_type="dataset", revision=name.revision))
    except (HfHubHTTPError, OfflineModeIsEnabled, OSError, ValueError) as exc:
        raise InstancesError(
            f"dataset {name}: not in the Hugging Face cache and it cannot be downloaded "
            f"({type(exc).__name__}: {exc}); download it where the Hub is reachable "
            "(huggingface-cli download --repo-type dataset ...) and copy the cache "
            "(HF_HOME) here, or give a local file or folder"
        ) from None


def hub_status(name: HubName) -> str:
    """What loading ``name`` would do, for a dry run: read the cache, or download."""
    cached = cached_snapshot(name)
    if cached is not None:
        return f"{name}: in the Hugging Face cache ({cached})"
    return f"{name}: not in the Hugging Face cache; the run would download it from the Hub"
