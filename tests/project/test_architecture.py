"""The house's floors, as pyproject.toml's import-linter contracts declare them: sweflow's
packages import only from the floors below their own and never import Prefect, and a library
with one import running back up is refused, naming it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).parent / "lint-imports"
MAX_MODULE_LINES = 600


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    """import-linter on the library under ``root`` (the package is read from that folder)."""
    return subprocess.run([str(LINT)], cwd=root, capture_output=True, text=True, timeout=300)


def lint_with_import(tmp_path: Path, module: str, imported: str) -> str:
    """import-linter's report on a copy of the library whose ``module`` (a path under
    sweflow/) also imports ``imported``."""
    shutil.copytree(ROOT / "sweflow", tmp_path / "sweflow")
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    source = tmp_path / "sweflow" / module
    source.write_text(source.read_text() + f"\nimport {imported}  # noqa\n")
    result = lint(tmp_path)
    assert result.returncode != 0, result.stdout
    return result.stdout


def test_an_import_running_back_up_is_refused(tmp_path: Path) -> None:
    report = lint_with_import(tmp_path, "sandbox/spec.py", "sweflow.grading")
    assert "sweflow.sandbox is not allowed to import sweflow.grading" in report
    assert "sweflow.sandbox.spec -> sweflow.grading" in report


def test_the_agent_loop_importing_its_teacher_is_refused(tmp_path: Path) -> None:
    """The loop knows neither the replay teacher nor the batch runner: a teacher reaches it
    through the model protocol, imitability is judged where runs are collected."""
    report = lint_with_import(tmp_path, "agent/loop.py", "sweflow.agent.teacher.imitable")
    assert "the agent loop knows neither its teacher nor its runs BROKEN" in report
    assert "sweflow.agent.loop is not allowed to import sweflow.agent.teacher" in report


def test_the_library_keeps_its_floors() -> None:
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout[-4000:]
    assert "imports run downward only KEPT" in result.stdout
    assert "the agent loop knows neither its teacher nor its runs KEPT" in result.stdout
    assert "the library never imports Prefect KEPT" in result.stdout


def test_no_module_is_over_600_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): lines
        for path in sorted((ROOT / "sweflow").rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"split these modules (at most {MAX_MODULE_LINES} lines each): {long}"


def test_no_script_or_folder_shadows_an_installed_module() -> None:
    """A script run as ``python benchmarks/NAME.py`` has its folder first on sys.path, so a file
    there named like a dependency (``swebench.py``, ``ray.py``) replaces it for everything the
    script imports; the repository root's packages (flows, tasks) are on the path of every stage."""
    names = {p.stem: p for d in ("benchmarks", "scripts") for p in (ROOT / d).glob("*.py")}
    names |= {p.name: p for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    probe = (
        "import importlib.util as u, json, sys; "
        "print(json.dumps({n: bool(u.find_spec(n)) for n in sys.argv[1:]}))"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe, *sorted(names)],
        cwd="/",
        check=True,
        capture_output=True,
        text=True,
        env={"PATH": "/bin"},
    )
    shadowing = [
        str(names[n].relative_to(ROOT))
        for n, taken in json.loads(found.stdout).items()
        if taken and n != "sweflow"
    ]
    assert not shadowing, f"rename these: an installed module has the same name: {shadowing}"


def test_the_tests_live_in_folders_named_after_the_packages() -> None:
    """tests/<package>/ holds a package's tests and tests/project/ the checkout's own (docs,
    style, architecture); conftest.py and the helpers tests import by name stay at the top.
    Test files keep unique names: pytest imports them by basename (no __init__.py)."""
    packages = {p.name for p in (ROOT / "sweflow").iterdir() if (p / "__init__.py").is_file()}
    tests = [p for p in (ROOT / "tests").rglob("test_*.py") if "data" not in p.parts]
    misplaced = [
        str(p.relative_to(ROOT)) for p in tests if p.parent.name not in packages | {"project"}
    ]
    assert not misplaced, f"not in a package's folder: {misplaced}"
    names = [p.name for p in tests]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
