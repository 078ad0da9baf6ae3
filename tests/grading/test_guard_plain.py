"""The tamper guard's plain runner (sweflow/data/guard_plain.py) run for real on a small package:
a test that uses more of pytest than the stand-in gives proves nothing either way (unrunnable),
never a failure that would refuse an honest patch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import sweflow.data

PLAIN = Path(sweflow.data.__file__).parent / "guard_plain.py"

TESTS = """\
import pytest

from pkg import div


def test_exconly():
    with pytest.raises(ZeroDivisionError) as caught:
        div(1, 0)
    assert caught.exconly() == "ZeroDivisionError: division by zero"
    assert caught.typename == "ZeroDivisionError" and caught.errisinstance(ArithmeticError)


def test_exconly_wrong():
    with pytest.raises(ZeroDivisionError) as caught:
        div(1, 0)
    assert caught.exconly() == "ZeroDivisionError: something else"


def test_traceback():
    with pytest.raises(ZeroDivisionError) as caught:
        div(1, 0)
    assert len(caught.traceback) > 1


def test_match():
    caught = pytest.raises(ZeroDivisionError, div, 1, 0)
    assert caught.match("by zero") and not hasattr(caught, "__wrapped__")
"""


def _plain(tmp_path: Path, names: list[str]) -> dict[str, tuple[str, str]]:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("def div(a, b):\n    return a / b\n")
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_div.py").write_text(TESTS)
    out = tmp_path / "plain.out"
    spec = {
        "changed": [str(tmp_path / "pkg" / "__init__.py")],
        "out": str(out),
        "tests": [
            {
                "id": f"tests/test_div.py::{name}",
                "module": "test_div",
                "file": str((tests / "test_div.py").resolve()),
                "cls": None,
                "name": name,
                "unittest": False,
            }
            for name in names
        ],
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    subprocess.run(
        [sys.executable, str(PLAIN), str(tmp_path / "spec.json")],
        cwd=tmp_path,
        check=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)},
    )
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    return {line["id"].split("::")[1]: (line["o"], line["why"]) for line in lines}


@pytest.mark.quick
def test_the_stand_in_raises_answers_as_pytests_exception_info(tmp_path: Path) -> None:
    """glom's tests read ``exconly()`` and ``traceback`` of pytest.raises: the stand-in had
    neither, so the guard refused the gold patches of 5 of glom's tasks (AttributeError: '_Raised'
    object has no attribute 'exconly'), and the teacher lost them."""
    results = _plain(
        tmp_path, ["test_exconly", "test_exconly_wrong", "test_traceback", "test_match"]
    )
    assert results["test_exconly"] == ("passed", "")
    assert results["test_match"] == ("passed", "")
    assert results["test_exconly_wrong"][0] == "failed"  # the stand-in's answer is checked
    assert results["test_traceback"] == (
        "unrunnable",
        "the test uses pytest.raises(...).traceback",
    )
