"""Requirements of an environment read from its repository, as the SWE-bench harness reads them.

The harness fetches the first of a repo's requirements paths that exists at the environment
commit, inlines its ``-r`` includes (relative to the file's folder) and drops ``-e .``, comments
and ``.[test`` lines; conda environment files are created with conda. Here both come from the
local mirror, and an environment.yml is translated to pip: conda names that differ on PyPI are
renamed, native libraries that the PyPI wheels bundle are dropped (or added as the wheel that
carries them, where a conda package pulls one in), and a package that exists
only on conda is an error naming it, never a half-built environment, unless the spec lists it
as optional (a test dependency whose tests skip without it): then it is left out and named.
"""

from __future__ import annotations

import posixpath
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

import yaml

from sweflow.errors import SweflowError
from sweflow.harness.specs import EnvSpec
from sweflow.instances import Instance

# Packages the harness replaces in every requirements file (yanked from PyPI).
REPLACED = {"types-pkg_resources": "types-setuptools"}
_EXCLUDED_PREFIXES = ("-e .", "#", ".[test")
# conda-forge name -> PyPI name, where they differ.
CONDA_RENAMES = {
    "matplotlib-base": "matplotlib",
    "iris": "scitools-iris",
    "pytables": "tables",
    "pseudonetcdf": "PseudoNetCDF",
    "python-graphviz": "graphviz",
    "pyqt": "PyQt5",
    "dask-core": "dask",
}
# Native libraries and tools that PyPI wheels bundle or that pip does not need.
CONDA_NATIVE = frozenset(
    {
        "python",
        "pip",
        "hdf5",
        "libnetcdf",
        "cairo",
        "pkg-config",
        "compilers",
        "c-compiler",
        "cxx-compiler",
        "ccache",
        "make",
        "cmake",
        "libgdal",
        "proj",
        "geos",
        "freetype",
        "qhull",
    }
)
# conda packages that pull a native library in with them, and the PyPI wheel that carries it
# (cfgrib's conda recipe brings libeccodes; on PyPI it is ecmwflibs, which eccodes finds).
CONDA_LIBRARY_WHEELS = {"cfgrib": "ecmwflibs"}
# On conda only: no PyPI distribution provides them.
CONDA_ONLY = frozenset({"cdms2", "ffmpeg", "graphviz", "nodejs", "pynio", "esmpy"})
_MATCH_SPEC = re.compile(r"^([A-Za-z0-9_.\-]+)\s*(?:(==|>=|<=|!=|>|<|=)?\s*(\S.*))?$")


class RequirementsError(SweflowError):
    """A requirements or environment file that cannot become a pip requirements list."""


def read_repo_file(git_dir: Path, commit: str, paths: Sequence[str]) -> tuple[str, str] | None:
    """(path, text) of the first of ``paths`` that exists at ``commit``, or None."""
    for path in paths:
        shown = _show(git_dir, commit, path)
        if shown is not None:
            return path, shown
    return None


def inline_requirements(git_dir: Path, commit: str, path: str, text: str) -> str:
    """The file's requirements with its ``-r`` includes inlined first, as the harness orders
    them; an include missing from the commit is skipped, as the harness skips it."""
    folder = posixpath.dirname(path)
    included: list[str] = []
    own: list[str] = []
    for line in text.split("\n"):
        if line.strip().startswith("-r"):
            target = posixpath.normpath(posixpath.join(folder, line.strip()[2:].strip()))
            extra = _show(git_dir, commit, target)
            if extra is not None:
                included += [x for x in extra.split("\n") if not _excluded(x)]
        elif not _excluded(line):
            own.append(line)
    return _replace_yanked("\n".join([*included, "\n".join(own)]))


def conda_to_pip(text: str, where: str, optional: Sequence[str] = ()) -> tuple[str, list[str]]:
    """pip requirements for a conda environment file, and the conda-only packages of
    ``optional`` it left out; ``where`` names the file in errors."""
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise RequirementsError(f"{where}: not valid YAML: {exc}") from None
    deps = doc.get("dependencies") if isinstance(doc, dict) else None
    if not isinstance(deps, list):
        raise RequirementsError(f"{where}: no dependencies list")
    out: list[str] = []
    conda_only: list[str] = []
    left_out: list[str] = []
    skippable = {name.lower() for name in optional}
    for dep in deps:
        if isinstance(dep, dict):
            out += [str(x) for x in dep.get("pip", [])]
            continue
        match = _MATCH_SPEC.match(str(dep).split("::")[-1].strip())
        if match is None:
            raise RequirementsError(f"{where}: cannot read the conda dependency {dep!r}")
        name, op, version = match.groups()
        key = name.lower()
        if key in CONDA_NATIVE:
            continue
        if key in CONDA_ONLY:
            (left_out if key in skippable else conda_only).append(name)
            continue
        out.append(CONDA_RENAMES.get(key, name) + _pip_version(op, version))
        if key in CONDA_LIBRARY_WHEELS:
            out.append(CONDA_LIBRARY_WHEELS[key])
    if conda_only:
        raise RequirementsError(
            f"{where} needs packages that exist only on conda (no pip equivalent): "
            + ", ".join(conda_only)
        )
    return _replace_yanked("\n".join(out)), left_out


def _pip_version(op: str | None, version: str | None) -> str:
    """A conda version constraint in pip's syntax: ``=1.2`` (conda: 1.2.*) becomes ``==1.2.*``."""
    if not version:
        return ""
    version = version.split()[0]  # drop a build string
    if op in (None, "="):
        return f"=={version}" if version.endswith("*") else f"=={version}.*"
    return f"{op}{version}"


def _excluded(line: str) -> bool:
    return line.strip().startswith(_EXCLUDED_PREFIXES)


def _replace_yanked(text: str) -> str:
    for old, new in REPLACED.items():
        text = re.sub(rf"^{re.escape(old)}([<>=!~]=?.*|$)", new, text, flags=re.MULTILINE)
    return text


def _show(git_dir: Path, commit: str, path: str) -> str | None:
    shown = subprocess.run(
        ["git", "--git-dir", str(git_dir), "show", f"{commit}:{path}"],
        capture_output=True,
        text=True,
    )
    return shown.stdout if shown.returncode == 0 else None


def spec_requirements(spec: EnvSpec, instance: Instance, git_dir: Path) -> str | None:
    """The pip requirements the spec's ``packages`` file gives, read as the harness reads it:
    the first of its per-repo paths that exists at the environment commit, ``-r`` includes
    inlined; an environment.yml translated to pip (conda-only packages are a named error
    unless the spec lists them in ``conda_optional``)."""
    if spec.packages_file is None:
        return None
    commit = instance.environment_setup_commit or instance.base_commit
    found = read_repo_file(git_dir, commit, spec.package_files)
    if found is None:
        raise RequirementsError(
            f"{instance.instance_id}: packages: {spec.packages}, but {instance.repo} has "
            f"none of {', '.join(spec.package_files)} at {commit}"
        )
    path, text = found
    if spec.packages_file == "environment.yml":
        where = f"{instance.repo}:{path} at {commit[:12]}"
        pip_text, left_out = conda_to_pip(text, where, spec.conda_optional)
        if left_out:  # named where people read the build: the requirements file's head
            note = ", ".join(left_out)
            pip_text = f"# left out, conda-only and optional in the spec: {note}\n{pip_text}"
        return pip_text
    return inline_requirements(git_dir, commit, path, text)
