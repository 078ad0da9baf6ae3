"""What a pipeline config's data will be, checked without the network: each dataset read
through its format (from disk or the Hugging Face cache), or what would be downloaded."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from sweflow.envcache.dataset import Dataset
from sweflow.formats import format_of
from sweflow.harness.specs import SpecError
from sweflow.instances.hub import cached_snapshot, hub_status, parse_hub_name
from sweflow.pipeline.config import PipelineConfig


@dataclass(frozen=True)
class DataCheck:
    """One dataset of the config: where it comes from and what its rows are."""

    field: str
    source: str
    rows: int | None = None  # None: not read (not on disk, not in the cache)
    formats: str = ""
    with_image: int = 0
    with_recipe: int = 0
    skipped: int = 0
    note: str = ""


def check_data(config: PipelineConfig, root: Path) -> list[DataCheck]:
    """The config's dataset (and ``dataset.eval``) read as the run will read them, or, for a
    Hub id not in the cache, what the run would download."""
    section = config.dataset
    sources = [("dataset", section.path, section.split, section.format, section.limit)]
    if section.eval is not None:
        e = section.eval
        sources.append(("dataset.eval", e.path, e.split, e.format, e.limit))
    checks = []
    for field, path, split, fmt, limit in sources:
        local = path if path.is_absolute() else root / path
        hub = None if local.exists() else parse_hub_name(str(path))
        if hub is not None and cached_snapshot(hub) is None:
            checks.append(DataCheck(field, str(path), note=hub_status(hub)))
            continue
        data = Dataset.load(
            str(path) if hub else local,
            specs=section.specs,
            mirror=section.repo_mirror,
            split=split,
            limit=limit,
            strict=False,
            format=fmt,
        )
        counts = Counter(format_of(row).name for row in data.rows)
        checks.append(
            DataCheck(
                field,
                str(path),
                len(data.rows),
                ", ".join(f"{name} {n}" for name, n in counts.most_common()),
                sum(1 for row in data.rows if row.image),
                sum(1 for row in data.rows if _has_recipe(data, row)),
                len(data.skipped),
                hub_status(hub) if hub else "",
            )
        )
    return checks


def _has_recipe(data: Dataset, row) -> bool:
    if row.eval_script:
        return True
    try:
        data.specs.get(row.repo, row.version or "")
    except SpecError:
        return False
    return True
