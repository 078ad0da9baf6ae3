"""What to synthesize: sources, operators, seed and limits (a YAML recipe or CLI flags)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from sweflow.configfile import ConfigModel, read_yaml_mapping, validate_model
from sweflow.errors import SweflowError
from sweflow.harness.specs import EnvSpec
from sweflow.synth.operators import OPERATORS
from sweflow.synth.sources import SourceError, parse_source

# The environment of a pure-Python project tested with pytest, pinned so that builds repeat
# (the wheels are what scripts/prefetch.py puts in the offline wheelhouse).
DEFAULT_PIP_PACKAGES = [
    "pytest==8.3.5",
    "pluggy==1.5.0",
    "iniconfig==2.0.0",
    "packaging==24.2",
    "setuptools==75.8.0",
    "flit_core==3.12.0",
]
DEFAULT_SPEC: dict[str, Any] = {
    "python": "3.11",
    "pip_packages": DEFAULT_PIP_PACKAGES,
    "install": "python -m pip install --no-build-isolation --no-deps -e .",
    "test_cmd": "pytest -rA -p no:cacheprovider",
}


class SynthConfigError(SweflowError):
    """A recipe that cannot be used; the message names the file and field."""


class SourceConfig(ConfigModel):
    source: str = Field(description="pypi:NAME==VERSION or a local git repository")
    repo: str | None = Field(None, description='dataset "owner/name" (default pypi/NAME)')
    version: str | None = Field(None, description="spec version key (default: the release)")
    spec: dict[str, Any] = Field(default_factory=dict, description="EnvSpec keys over the default")
    max_tasks: int | None = Field(None, ge=1, description="overrides the recipe's max_tasks")

    def env_spec(self) -> EnvSpec:
        return EnvSpec(**{**DEFAULT_SPEC, **self.spec})


class SplitConfig(ConfigModel):
    """Which repositories a learning set holds out: written as ``split.json`` beside the
    dataset, in the pipeline's ``split`` form (``{"by": "repo", "eval": [...]}``)."""

    by: Literal["repo"] = "repo"
    eval: list[str] = Field(min_length=1, description='held-out repos ("owner/name")')


class SynthConfig(ConfigModel):
    sources: list[SourceConfig] = Field(min_length=1)
    out: Path = Field(description="the dataset JSONL; specs.yaml and repos/ go beside it")
    seed: int = 0
    operators: list[str] = Field(default_factory=lambda: list(OPERATORS))
    max_tasks: int = Field(10, ge=1, description="valid tasks per source")
    max_candidates: int | None = Field(None, ge=1, description="candidates tried per source")
    max_workers: int = Field(2, ge=1)
    max_fail_fraction: float = Field(
        0.3, gt=0, le=1, description="reject bugs failing more of the suite than this"
    )
    timeout_factor: float = Field(5.0, gt=1, description="candidate timeout / clean suite time")
    final_check: bool = Field(True, description="build and validate the emitted tasks")
    split: SplitConfig | None = Field(None, description="held-out repos, written to split.json")

    @field_validator("operators")
    @classmethod
    def _known(cls, names: list[str]) -> list[str]:
        unknown = [n for n in names if n not in OPERATORS]
        if unknown:
            raise ValueError(f"unknown operator(s) {unknown}; known: {', '.join(OPERATORS)}")
        return names

    @model_validator(mode="after")
    def _held_out_are_sources(self) -> SynthConfig:
        if self.split is not None:
            repos = {s.repo or parse_source_repo(s.source) for s in self.sources}
            if unknown := sorted(set(self.split.eval) - repos):
                raise ValueError(f"split.eval names repos no source gives: {unknown}")
            if not repos - set(self.split.eval):
                raise ValueError("split.eval holds out every source: nothing is left to train")
        return self


def parse_source_repo(text: str) -> str:
    """The dataset repo a source gives by default (``pypi/NAME``, ``local/FOLDER``)."""
    try:
        return parse_source(text).repo
    except SourceError:
        return text  # a missing local path: the run names it when it gets there


def load_config(path: Path, **overrides: Any) -> SynthConfig:
    """A recipe file; relative paths in it are relative to the file's folder."""
    data = read_yaml_mapping(path, "synth recipe", SynthConfigError)
    if "out" in data and not Path(str(data["out"])).is_absolute():
        data["out"] = str((path.parent / str(data["out"])).resolve())
    data.update({k: v for k, v in overrides.items() if v is not None})
    return validate_model(SynthConfig, data, f"synth recipe {path}", SynthConfigError)
