"""Environment specs per (repo, version), in the vocabulary of the SWE-bench harness.

A specs file has the shape of swebench's old ``MAP_REPO_VERSION_TO_SPECS`` (swebench 5 dropped
the per-repo tables, so a dataset without images needs one again)::

    psf/requests:
      "2.0": {python: "3.9", packages: pytest, install: python -m pip install ., test_cmd: pytest}
      "2.1": {extends: "2.0", pip_packages: [urllib3<2]}

``extends`` names another version of the same repo whose keys are taken first; the version's own
keys replace them whole (lists and mappings are not merged). Numbers, booleans and dates in a YAML
or JSON file are kept as the text written, so ``0.20`` stays the version "0.20" (not 0.2) and
``python: 3.10`` stays "3.10" (not 3.1).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from sweflow.errors import SweflowError

# ``packages`` values that mean "read the list from this file of the repository", as in the harness.
REPO_PACKAGE_FILES: tuple[str, ...] = ("requirements.txt", "environment.yml")
# The specs name of the built-in table: every SWE-bench (full, Lite, Verified) repo and version.
BUILTIN_SPECS = "swebench"

# The fields that shape the environment layer, the only ones in ``EnvSpec.env_digest``.
ENV_LAYER_FIELDS: tuple[str, ...] = (
    "python",
    "packages",
    "pip_packages",
    "pre_install",
    "env_vars",
)
# The fields read only when tests run (by the eval script): editing them changes no layer.
TEST_TIME_FIELDS: tuple[str, ...] = ("test_cmd", "eval_commands", "log_parser", "test_directives")
_DIGEST_SCHEMA = "sweflow.envspec/1"  # bump when the digest's payload changes meaning
_REPO_RE = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")


# A DNS name (it goes into /etc/hosts, a certificate and shell lines).
HostName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")]


class SpecError(SweflowError):
    """A specs file that cannot be read, or a (repo, version) it has no spec for."""


class EnvSpec(BaseModel):
    """How to build and test one (repo, version), as in the harness's spec tables.

    ``packages`` is a space-separated package list, or one of ``REPO_PACKAGE_FILES`` meaning "the
    repository's own file". ``test_cmd`` is one command that the test files are appended to, or a
    list of complete commands (the harness's multi-language form, run as they are).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    python: str = Field(pattern=r"^\d+\.\d+(\.\d+)?$", description='e.g. "3.9"')
    packages: str = ""
    pip_packages: list[str] = []
    pre_install: list[str] = Field([], description="shell commands run before the packages")
    install: str = Field("", description='installs the repo, e.g. "python -m pip install -e ."')
    test_cmd: str | list[str] = ""
    eval_commands: list[str] = Field([], description="shell commands run before the tests")
    env_vars: dict[str, str] = {}
    requirements_paths: list[str] = Field(
        [], description="where `packages: requirements.txt` (or environment.yml) is looked for"
    )
    setup_repo: list[str] = Field(
        [], description="shell commands run in the repository before `install` (e.g. a sed fix)"
    )
    log_parser: str = Field("", description="swebench parser name, e.g. parse_log_sympy")
    pypi_cutoff: date | None = Field(
        None,
        description="builds resolve unpinned packages as of this date (YYYY-MM-DD): files "
        "uploaded to PyPI later are hidden from the build's pip",
    )
    conda_optional: list[str] = Field(
        [],
        description="conda-only packages of an environment.yml the environment goes without "
        "(optional test dependencies whose tests skip without them); the build log names them",
    )
    emulated_hosts: list[HostName] = Field(
        [],
        description="names the test suite reaches online (e.g. httpbin.org): in the test "
        "sandbox they resolve to a local httpbin over HTTP and HTTPS, its CA trusted through "
        "REQUESTS_CA_BUNDLE and by every bundle of public roots (requests' own cacert.pem too); "
        "other names do not resolve, other addresses time out",
    )
    test_directives: Literal["files", "django", "mypy_cases"] = Field(
        "files",
        description="test files as given, as Django's runtests module paths, or (SWE-Gym's "
        "mypy) one -k expression of the test patch's [case NAME] names",
    )

    @property
    def packages_file(self) -> str | None:
        """The repository file the packages come from, or ``None`` for an explicit list."""
        return self.packages if self.packages in REPO_PACKAGE_FILES else None

    @property
    def package_files(self) -> list[str]:
        """The paths tried, in order, for ``packages_file`` (the harness's per-repo paths)."""
        if self.packages_file is None:
            return []
        return self.requirements_paths or [self.packages_file]

    def env_digest(self) -> str:
        """sha256 of the fields that define the environment layer, as canonical JSON.

        ``install``, ``test_cmd`` and ``eval_commands`` are left out on purpose: ``install`` builds
        the repository at an instance's base_commit, so it runs in the instance layer, and the
        other two only run at test time and leave nothing in the environment. Leaving them out
        lets every instance of a (repo, version) share one environment layer even when those
        commands are edited. List order counts (commands run in order). When ``packages_file``
        is set, the layer also depends on that file in the repository: the builder adds it (or
        the environment_setup_commit) to the layer's key.
        """
        payload = {"schema": _DIGEST_SCHEMA, **self.model_dump(include=set(ENV_LAYER_FIELDS))}
        if self.pypi_cutoff is not None:  # only when set: the digests of other specs stay
            payload["pypi_cutoff"] = self.pypi_cutoff.isoformat()
        if self.conda_optional:
            payload["conda_optional"] = sorted(self.conda_optional)
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()

    def build_digest(self) -> str:
        """sha256 of every field a build reads (all but ``TEST_TIME_FIELDS``), as canonical JSON.

        An instance built from a spec with another build digest is stale: its environment or
        its install step would differ now. Fields left at their defaults are left out, so a
        field added to EnvSpec later changes no stored instance's digest."""
        fields = self.model_dump(mode="json", exclude=set(TEST_TIME_FIELDS), exclude_defaults=True)
        payload = {"schema": _DIGEST_SCHEMA, **fields}
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class SpecTable:
    """Specs by repo ("owner/name") and version, as loaded from one or more specs files."""

    specs: Mapping[str, Mapping[str, EnvSpec]] = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, data: Any, *, source: str = "specs") -> SpecTable:
        """Validate ``{repo: {version: {key: value}}}``; ``source`` names it in error messages."""
        if not isinstance(data, Mapping):
            raise SpecError(f"{source}: expected a mapping of repo -> version -> spec")
        table: dict[str, dict[str, EnvSpec]] = {}
        for repo, versions in data.items():
            if not isinstance(repo, str) or not _REPO_RE.fullmatch(repo):
                raise SpecError(f'{source}: repo key {repo!r} is not of the form "owner/name"')
            if not isinstance(versions, Mapping):
                raise SpecError(f"{source}: {repo}: expected a mapping of version -> spec")
            raw = {_version_text(v): spec for v, spec in versions.items()}
            table[repo] = {v: _validate(raw, repo, v, source) for v in raw}
        return cls(table)

    def as_mapping(self, repos: Collection[str] | None = None) -> dict[str, dict[str, Any]]:
        """The table as JSON data (of ``repos`` only, when given), which :meth:`from_mapping`
        reads back into the same table."""
        return {
            repo: {v: spec.model_dump(mode="json") for v, spec in versions.items()}
            for repo, versions in self.specs.items()
            if repos is None or repo in repos
        }

    def digest(self) -> str:
        """sha256 of the whole table, every field: the same table, read again elsewhere."""
        payload = json.dumps(self.as_mapping(), sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()

    def versions(self, repo: str) -> list[str]:
        """The versions known for ``repo``, in version order (empty for an unknown repo)."""
        return sorted(self.specs.get(repo, {}), key=_version_sort_key)

    def get(self, repo: str, version: str) -> EnvSpec:
        """The spec for (repo, version); the error lists what the table does have."""
        try:
            return self.specs[repo][version]
        except KeyError:
            pass
        if repo not in self.specs:
            known = ", ".join(sorted(self.specs)) or "none"
            raise SpecError(f"no environment spec for repo {repo} (repos with specs: {known})")
        known = ", ".join(self.versions(repo))
        raise SpecError(
            f"no environment spec for {repo} version {version!r} (versions known: {known})"
        )

    def merge(self, other: SpecTable) -> SpecTable:
        """A new table with ``other``'s (repo, version) specs replacing this one's."""
        merged = {repo: dict(versions) for repo, versions in self.specs.items()}
        for repo, versions in other.specs.items():
            merged.setdefault(repo, {}).update(versions)
        return SpecTable(merged)


def load_specs(path: Path | str) -> SpecTable:
    """Read a specs file: JSON if it ends in ``.json``, YAML otherwise; ``swebench`` (no such file
    in the working directory) is the built-in table of every SWE-bench repo and version."""
    path = Path(path)
    if str(path) == BUILTIN_SPECS and not path.exists():
        return builtin_specs()
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecError(f"cannot read specs file {path}: {exc.strerror or exc}") from exc
    try:
        if path.suffix == ".json":
            data = json.loads(text, parse_int=str, parse_float=str)
        else:
            data = yaml.load(text, Loader=_TextScalarLoader)  # a SafeLoader subclass
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise SpecError(f"specs file {path} is not valid {_format_name(path)}: {exc}") from exc
    return SpecTable.from_mapping(data, source=str(path))


def builtin_specs() -> SpecTable:
    """The harness's spec tables as data (sweflow/data/swebench_specs.yaml)."""
    return packaged_specs("swebench_specs.yaml", f"built-in specs ({BUILTIN_SPECS})")


def packaged_specs(name: str, label: str | None = None) -> SpecTable:
    """A spec table shipped in sweflow/data (a format's recipes: the harness's, SWE-Gym's)."""
    source = resources.files("sweflow.data").joinpath(name)
    data = yaml.load(source.read_text(), Loader=_TextScalarLoader)
    return SpecTable.from_mapping(data, source=label or f"sweflow/data/{name}")


def test_command(spec: EnvSpec, test_files: Sequence[str]) -> str:
    """The command that runs ``test_files``, built the way the harness builds it.

    A string ``test_cmd`` gets the files appended (``test_cmd + " " + " ".join(test_files)``,
    unquoted, exactly as the harness does, so its logs parse the same); the caller passes the
    harness's test directives (e.g. module names for Django). A list ``test_cmd`` is returned as
    one script line per command, without the files: the harness runs that form as written.
    """
    if not spec.test_cmd:
        raise SpecError("the environment spec has no test_cmd")
    if isinstance(spec.test_cmd, list):
        return "\n".join(spec.test_cmd)
    return " ".join([spec.test_cmd, *test_files])


test_command.__test__ = False  # type: ignore[attr-defined]  # not a pytest test, despite its name


class _TextScalarLoader(yaml.SafeLoader):
    """A safe YAML loader that keeps numbers, booleans and dates as the text written."""


def _scalar_text(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> str:
    return loader.construct_scalar(node)


for _tag in ("int", "float", "bool", "timestamp"):
    _TextScalarLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _scalar_text)


def _format_name(path: Path) -> str:
    return "JSON" if path.suffix == ".json" else "YAML"


def _version_text(version: Any) -> str:
    """A version key as text: numbers from a Python mapping (``0.2``) become ``"0.2"``."""
    if isinstance(version, bool) or not isinstance(version, str | int | float):
        raise SpecError(f"version key {version!r} is not a string or number")
    return str(version)


def _version_sort_key(version: str) -> tuple[tuple[int, int | str], ...]:
    """Orders "0.9" < "0.10" < "1.0"; non-numeric parts sort as text after numbers."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"[.\-_]", version))


def _validate(raw: Mapping[str, Any], repo: str, version: str, source: str) -> EnvSpec:
    where = f"{source}: spec for {repo} version {version!r}"
    values = _resolve_extends(raw, repo, version, where, ())
    try:
        return EnvSpec.model_validate(values)
    except ValidationError as exc:
        raise SpecError(f"{where}: {_describe(exc)}") from None


def _resolve_extends(
    raw: Mapping[str, Any], repo: str, version: str, where: str, chain: tuple[str, ...]
) -> dict[str, Any]:
    spec = raw[version]
    if not isinstance(spec, Mapping):
        raise SpecError(f"{where}: expected a mapping of keys, got {type(spec).__name__}")
    if "extends" not in spec:
        return dict(spec)
    base = _version_text(spec["extends"])
    if base in (*chain, version):
        cycle = " -> ".join([*chain, version, base])
        raise SpecError(f"{where}: 'extends' makes a cycle ({cycle})")
    if base not in raw:
        known = ", ".join(sorted(raw, key=_version_sort_key))
        raise SpecError(f"{where}: extends unknown version {base!r} (versions known: {known})")
    own = {k: v for k, v in spec.items() if k != "extends"}
    return {**_resolve_extends(raw, repo, base, where, (*chain, version)), **own}


def _describe(exc: ValidationError) -> str:
    known = ", ".join(EnvSpec.model_fields)
    problems = []
    for err in exc.errors():
        loc = ".".join(str(part) for part in err["loc"])
        if err["type"] == "extra_forbidden":
            problems.append(f"unknown key {loc!r} (known keys: {known}, extends)")
        elif err["type"] == "missing":
            problems.append(f"missing required key {loc!r}")
        else:
            problems.append(f"{loc}: {err['msg']}")
    return "; ".join(problems)
