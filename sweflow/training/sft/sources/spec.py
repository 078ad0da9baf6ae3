"""Where SFT data comes from: one :class:`DataSource` per file or Hugging Face dataset, several
mixed by counts or weights (``sft.data`` in a pipeline config, ``--data`` on the command line).

On the command line a source is ``SOURCE[,key=value...]``: ``runs/collect/sft.jsonl``,
``SWE-bench/SWE-smith-trajectories:tool,count=500``,
``nebius/SWE-agent-trajectories@main:train,weight=0.3,format=swe-agent``. SOURCE is a file
(``.jsonl``, ``.json``, ``.parquet``), a Hugging Face dataset id ``org/name[@revision][:split]``,
or, in a pipeline, ``collect`` (that run's collected trajectories).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, model_validator

from sweflow.configfile import ConfigModel, describe
from sweflow.errors import ConfigError

COLLECT = "collect"
FILE_SUFFIXES = (".jsonl", ".json", ".parquet")
HUB_ID = re.compile(r"\A([\w.-]+/[\w.-]+)(?:@([\w./-]+?))?(?::([\w.-]+))?\Z")
FormatName = Literal["auto", "sweflow", "swe-smith", "swe-agent", "openhands"]


class DataSource(ConfigModel):
    source: str = Field(
        description="a .jsonl/.json/.parquet file, a Hugging Face dataset id "
        "org/name[@revision][:split], or collect (the pipeline's collected trajectories)"
    )
    format: FormatName = Field("auto", description="auto: told from each row's fields")
    count: int | None = Field(None, ge=1, description="take this many of its usable rows")
    weight: float | None = Field(
        None, gt=0, description="its share of the mix (with the other sources' weights)"
    )
    resolved_only: bool = Field(True, description="refuse rows whose run did not resolve")

    @model_validator(mode="after")
    def _one_size(self) -> DataSource:
        if self.count is not None and self.weight is not None:
            raise ValueError("a source takes a count or a weight, not both")
        if self.source != COLLECT and self.hub() is None and not self.is_file_name():
            raise ValueError(
                f"{self.source!r} is no file ({', '.join(FILE_SUFFIXES)}) and no Hugging Face "
                "dataset id org/name[@revision][:split]"
            )
        return self

    def is_file_name(self) -> bool:
        return self.source.endswith(FILE_SUFFIXES) or Path(self.source).is_file()

    def hub(self) -> tuple[str, str | None, str | None] | None:
        """(dataset id, revision, split) when the source names a Hugging Face dataset."""
        if self.is_file_name():
            return None
        found = HUB_ID.match(self.source)
        return (found.group(1), found.group(2), found.group(3)) if found else None


def parse_source(text: str) -> DataSource:
    """A ``SOURCE[,key=value...]`` option as a DataSource; ConfigError names what is wrong."""
    source, *options = text.split(",")
    fields: dict[str, str] = {"source": source.strip()}
    for option in options:
        key, sep, value = option.partition("=")
        if not sep:
            raise ConfigError(f"--data {text!r}: {option!r} is not key=value")
        fields[key.strip()] = value.strip()
    try:
        return DataSource(**fields)
    except ValidationError as exc:
        raise ConfigError(f"--data {text!r}: {describe(exc)}") from None


def missing_files(sources: list[DataSource], root: Path | None = None) -> list[str]:
    """The sources that name a file that is not there (checked before any work starts)."""
    base = root or Path.cwd()
    return [
        s.source
        for s in sources
        if s.source != COLLECT and s.hub() is None and not (base / s.source).is_file()
    ]
