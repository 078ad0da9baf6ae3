"""Write sweflow/data/swebench_specs.yaml from the SWE-bench harness's published spec tables.

The tables are swebench 4.x's ``swebench/harness/constants/python.py`` (the last version before
swebench 5 moved the specs into the rows) and the repo -> log parser map of
``swebench/harness/log_parsers/python.py``. Get both from a SWE-bench clone, e.g.::

    git -C SWE-bench show 25c5235:swebench/harness/constants/python.py > constants.py
    git -C SWE-bench show 25c5235:swebench/harness/log_parsers/python.py > parsers.py
    python scripts/swebench_specs.py constants.py parsers.py --revision 25c5235

What changes on the way (the harness builds conda environments; sweflow builds venvs):
- ``packages`` lists are conda package names that are also pip names here; they stay, installed
  with pip. ``requirements.txt`` and ``environment.yml`` stay, with the harness's per-repo paths
  as ``requirements_paths`` (the environment.yml is translated to pip at build time).
- ``pre_install`` commands that edit the repository (sed on setup.py, tox.ini...) or fetch into
  /testbed move to ``setup_repo`` (run in /testbed before ``install``); the system ones (apt-get,
  locales) stay in ``pre_install``, run as root in the base.
- Django's test directives become module paths (``test_directives: django``), as the harness did.
- Keys for docker only (``nano_cpus``, ``execute_test_as_nonroot``, ``no_use_env``) are dropped.
- Every spec resolves its unpinned packages as of ``HARNESS_ERA`` (``pypi_cutoff``), not today:
  the day after the newest release any pin of the tables names (tox 4.16.0, uploaded to PyPI
  2024-07-03), so every pin exists and nothing newer than what the tables were written
  against does (docutils 0.22, July 2025, breaks sphinx 3.x-4.x rows).
- A conda-only package with no pip equivalent fails the build with its name, unless
  ``CONDA_OPTIONAL`` lists it for the repo (a test dependency whose tests skip without it).
- Test sandboxes are offline: the hosts a suite calls (``EMULATED_HOSTS``) are emulated there.
"""

from __future__ import annotations

import argparse
import ast
import re
import runpy
from pathlib import Path

import yaml

OUT = Path(__file__).resolve().parent.parent / "sweflow" / "data" / "swebench_specs.yaml"
COPIED = ("python", "packages", "pip_packages", "install", "test_cmd", "eval_commands")
DROPPED = {"nano_cpus", "execute_test_as_nonroot", "no_use_env", "pre_install"}
HARNESS_ERA = "2024-07-04"  # every spec's pypi_cutoff (see the module docstring)
# Conda-only packages of a repo's environment.yml that the environment may go without: optional
# test dependencies whose tests skip without them (xarray's ``requires_cdms2`` tests; no
# FAIL_TO_PASS or PASS_TO_PASS list of SWE-bench full names one).
CONDA_OPTIONAL = {"pydata/xarray": ["cdms2"]}
# System libraries that a repo's environment.yml brings in through conda packages and pip wheels
# do not bundle: ecmwflibs (libeccodes for cfgrib on PyPI) links glib, which conda's eccodes
# package depends on.
CONDA_SYSTEM_LIBRARIES = {"pydata/xarray": "apt-get update && apt-get install -y libglib2.0-0"}
# The harness's base image has build-essential and its conda interpreters their C headers; repos
# whose install compiles C extensions get both here (sweflow's Debian bases carry neither; a
# pyenv interpreter has its headers already).
COMPILER = "apt-get update && apt-get install -y build-essential python3-dev"
COMPILED = {"astropy/astropy", "matplotlib/matplotlib", "scikit-learn/scikit-learn"}
# Hosts a repo's suite reaches online under the harness (docker with a network), emulated in the
# offline test sandbox (sweflow.harness.internet): requests' tests call httpbin.org and follow
# a redirect to www.google.co.uk; Sphinx's linkcheck and remote-image tests fetch pages and
# images of these four (their recorded sites: sweflow/data/sites/).
EMULATED_HOSTS = {
    "psf/requests": ["httpbin.org", "www.google.co.uk"],
    "sphinx-doc/sphinx": ["www.google.com", "www.python.org", "www.sphinx-doc.org", "www.w3.org"],
}
# A pre_install command that touches the repository checkout rather than the system.
REPO_COMMAND = re.compile(r"\b(setup\.py|setup\.cfg|pyproject\.toml|tox\.ini)\b|/testbed|QHULL")


def parser_names(parsers_py: Path, table: str = "MAP_REPO_TO_PARSER_PY") -> dict[str, str]:
    """repo -> parser function name, read from the ``table`` literal of a parsers module."""
    tree = ast.parse(parsers_py.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == table:
            return {k.value: v.id for k, v in zip(node.value.keys, node.value.values, strict=True)}
    raise SystemExit(f"{parsers_py}: no {table}")


def translate(repo: str, spec: dict, tables: dict, parsers: dict[str, str]) -> dict:
    unknown = set(spec) - set(COPIED) - DROPPED
    if unknown:
        raise SystemExit(f"{repo}: keys the translation does not know: {sorted(unknown)}")
    out = {k: spec[k] for k in COPIED if spec.get(k)}
    pre = spec.get("pre_install", [])
    system = [c for c in pre if not REPO_COMMAND.search(c)]
    if repo in COMPILED:
        system.insert(0, COMPILER)
    if spec.get("packages") == "environment.yml" and repo in CONDA_SYSTEM_LIBRARIES:
        system.append(CONDA_SYSTEM_LIBRARIES[repo])
    in_repo = [c for c in pre if REPO_COMMAND.search(c)]
    if system:
        out["pre_install"] = system
    if in_repo:
        out["setup_repo"] = in_repo
    if spec.get("packages") == "requirements.txt":
        out["requirements_paths"] = tables["MAP_REPO_TO_REQS_PATHS"].get(repo, ["requirements.txt"])
    elif spec.get("packages") == "environment.yml":
        out["requirements_paths"] = tables["MAP_REPO_TO_ENV_YML_PATHS"][repo]
    if repo == "django/django":
        out["test_directives"] = "django"
    if repo in parsers:
        out["log_parser"] = parsers[repo]
    if spec.get("packages") == "environment.yml" and repo in CONDA_OPTIONAL:
        out["conda_optional"] = list(CONDA_OPTIONAL[repo])  # copies: written out, not aliased
    if repo in EMULATED_HOSTS:
        out["emulated_hosts"] = list(EMULATED_HOSTS[repo])
    out["pypi_cutoff"] = HARNESS_ERA
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("constants", type=Path, help="swebench/harness/constants/python.py (4.x)")
    ap.add_argument("parsers", type=Path, help="swebench/harness/log_parsers/python.py (4.x)")
    ap.add_argument("--revision", required=True, help="the SWE-bench commit they came from")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    tables = runpy.run_path(str(args.constants))  # the harness's own data module, run locally
    parsers = parser_names(args.parsers)
    specs = {
        repo: {v: translate(repo, spec, tables, parsers) for v, spec in versions.items()}
        for repo, versions in sorted(tables["MAP_REPO_VERSION_TO_SPECS_PY"].items())
        if repo != "swe-bench/humaneval"  # not a repository: a fixed test.py per row
    }
    header = (
        "# Environment specs of every SWE-bench (full, Lite, Verified) repo and version, in the\n"
        "# harness vocabulary. Generated by scripts/swebench_specs.py from SWE-bench\n"
        f"# {args.revision} (harness/constants/python.py, log_parsers/python.py): edit the\n"
        "# script, not this file.\n"
    )
    text = yaml.safe_dump(specs, sort_keys=False, width=100, allow_unicode=True)
    args.out.write_text(header + text)
    n = sum(len(v) for v in specs.values())
    print(f"wrote {args.out}: {len(specs)} repos, {n} versions")


if __name__ == "__main__":
    main()
