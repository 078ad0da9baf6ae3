"""Every source's rows made student records, and the mix taken from them, with a report of what
became of each row: kept as it was, converted, or refused and why.

The sources' sizes: a ``count`` takes that many of a source's usable rows; ``weight``s share the
mix between the weighted sources in their proportions, as large as the scarcest allows; a source
with neither gives all its rows. Rows are taken in the source's order, or in a seeded order when
the seed is not 0 (the same on every machine).
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sweflow.agent.config import AgentConfig
from sweflow.agent.runs.export import write_records
from sweflow.training.sft.data import SFTDataError
from sweflow.training.sft.sources.episode import Refused
from sweflow.training.sft.sources.formats import detect, student_record
from sweflow.training.sft.sources.rows import BadRow, rows
from sweflow.training.sft.sources.spec import COLLECT, DataSource

EXAMPLES = 5  # refused rows named per source


@dataclass
class SourceReport:
    source: str
    formats: dict[str, int] = field(default_factory=dict)
    rows: int = 0
    kept: int = 0  # used as they were
    converted: int = 0  # rendered in the student's tool mode
    refused: int = 0
    reasons: dict[str, int] = field(default_factory=dict)  # why -> rows
    examples: list[str] = field(default_factory=list)  # "row: why", the first few
    selected: int = 0  # taken into the mix
    refused_rendering: int = 0  # then refused by the chat-template check (sft.data)

    def refuse(self, where: str, why: str) -> None:
        self.refused += 1
        kind = re.sub(r"\d+", "N", why)
        self.reasons[kind] = self.reasons.get(kind, 0) + 1
        if len(self.examples) < EXAMPLES:
            self.examples.append(f"{where}: {why}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def gather(
    sources: list[DataSource],
    *,
    tool_mode: str | None,
    agent: AgentConfig,
    seed: int = 0,
    files: dict[str, Path] | None = None,
    on_row: Callable[[str], None] | None = None,
) -> tuple[list[dict[str, Any]], list[SourceReport]]:
    """(the mix's records, one report a source). ``files`` resolves ``collect`` and relative
    paths to the files they name."""
    usable, reports = [], []
    for source in sources:
        report = SourceReport(source.source)
        records = _convert(
            source, (files or {}).get(source.source), tool_mode, agent, report, on_row
        )
        usable.append(records)
        reports.append(report)
    taken = _sizes(sources, [len(r) for r in usable])
    mix = []
    for records, size, report in zip(usable, taken, reports, strict=True):
        if seed:
            random.Random(f"{seed}:{report.source}").shuffle(records)
        report.selected = size
        mix += records[:size]
    return mix, reports


def _convert(
    source: DataSource,
    path: Path | None,
    tool_mode: str | None,
    agent: AgentConfig,
    report: SourceReport,
    on_row: Callable[[str], None] | None,
) -> list[dict[str, Any]]:
    if source.source == COLLECT and path is None:
        raise Refused("the source `collect` names a pipeline's collected trajectories")
    records, formats = [], Counter()
    for number, row in enumerate(rows(source, path), 1):
        report.rows += 1
        if on_row:
            on_row(source.source)
        if isinstance(row, BadRow):
            report.refuse(row.where, row.why)
            continue
        named = row.get("instance_id") or row.get("traj_id")
        place = f"line {number}" if path or source.hub() is None else f"row {number}"
        where = f"{place} ({named})" if named else place
        try:
            name = detect(row) if source.format == "auto" else source.format
            formats[name] += 1
            record, converted = student_record(row, name, tool_mode, agent, source.resolved_only)
        except Refused as exc:
            report.refuse(where, str(exc))
            continue
        report.converted += converted
        report.kept += not converted
        records.append({**record, "dataset": source.source})
    report.formats = dict(formats)
    return records


def _sizes(sources: list[DataSource], available: list[int]) -> list[int]:
    """How many rows each source gives the mix."""
    weighted = [(s.weight, n) for s, n in zip(sources, available, strict=True) if s.weight]
    scale = min((n / w for w, n in weighted), default=0.0)
    return [
        min(s.count, n) if s.count else int(scale * s.weight) if s.weight else n
        for s, n in zip(sources, available, strict=True)
    ]


def write_mix(
    sources: list[DataSource],
    out_dir: Path,
    *,
    tool_mode: str | None,
    agent: AgentConfig,
    seed: int = 0,
    files: dict[str, Path] | None = None,
    on_row: Callable[[str], None] | None = None,
) -> tuple[Path, list[SourceReport]]:
    """The mix as ``out_dir``/mixed.jsonl (what the rendering check and tokenizer read), and
    the sources' reports; an error naming every source's refusals when no row is usable."""
    records, reports = gather(
        sources, tool_mode=tool_mode, agent=agent, seed=seed, files=files, on_row=on_row
    )
    if not records and not any(r.rows for r in reports):
        raise SFTDataError(
            f"{', '.join(r.source for r in reports)}: no resolved trajectories to train on (no "
            "rows). Collect with a stronger teacher (collect.teacher: endpoint) or with the gold "
            "patches replayed through the agent's tools (collect.teacher: replay)."
        )
    if not records:
        why = "; ".join(
            f"{r.source}: {r.rows} rows, " + (", ".join(r.examples[:2]) or "none usable")
            for r in reports
        )
        raise SFTDataError(f"no usable SFT rows in --data: {why}")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = write_records(out_dir / "mixed.jsonl", records)
    return path, reports
