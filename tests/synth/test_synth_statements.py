"""Problem statements as a user writes a bug report: the failing tests with their messages and a
reproduction to paste, never naming where the bug is (pure Python; the demo set's statements
are checked against their gold patches)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from unidiff import PatchSet

from sweflow.agent.teacher.clues import reproduction
from sweflow.instances import load_instances
from sweflow.synth.reproduction import MAX_CHARS, standalone
from sweflow.synth.tasks import Bug, problem_statement

DEMO = Path(__file__).resolve().parents[2] / "data" / "demo" / "tasks.jsonl"
TESTS = """\
from __future__ import annotations
import os, pytest
from pkg.core import (window,
                      unused)
from pkg import helpers as h
from pkg.all import *

LIMIT = 3


def pairs(n):
    return window(range(n), size=LIMIT - 1)


@pytest.fixture
def data():
    return [1, 2]


def test_fixture(data):
    assert window(data) == []


@pytest.mark.parametrize("n", [1, 2])
def test_parametrized(n):
    assert window([n])


def test_unknown_name():
    assert window(MISSING)


class TestBox:
    def test_in_class(self):
        assert window([])


class TestSetUpByPytest:
    def setup_method(self):
        self.data = [1]

    def test_set_up(self):
        assert window(self.data)


def test_standalone():
    # the helper and the constant it reads come along
    assert pairs(3) == [(0, 1), (1, 2)]
    assert h.size() == 2
"""


def test_a_test_stands_alone_with_the_imports_and_the_helpers_it_uses() -> None:
    script = standalone(TESTS, "test_standalone")
    assert script is not None
    # names no part of the script reads are left out; a __future__ or * import stays whole
    imports = "from __future__ import annotations\nfrom pkg.core import window\n"
    assert script.startswith(imports + "from pkg import helpers as h\nfrom pkg.all import *\n")
    assert "LIMIT = 3" in script and "def pairs(n):" in script
    assert script.endswith("    assert h.size() == 2\n\n\ntest_standalone()\n")
    assert "def data" not in script and "test_fixture" not in script
    for test in (
        "test_fixture",
        "test_parametrized",
        "test_unknown_name",
        "test_in_class",
        "TestSetUpByPytest::test_set_up",
        "TestBox::test_missing",
        "test_standalone[1]",
    ):
        assert standalone(TESTS, test) is None, test
    assert standalone("def test_x(:\n", "test_x") is None
    # a module beside the test file is importable under pytest only (tabulate's test/common.py)
    assert standalone(TESTS, "test_standalone", beside={"helpers", "conftest"}) is not None
    assert standalone(TESTS, "test_standalone", beside={"pkg"}) is None
    assert standalone(TESTS, "TestBox::test_in_class") == (
        "from __future__ import annotations\nfrom pkg.core import window\nfrom pkg.all import *"
        "\n\n\nclass TestBox:\n    def test_in_class(self):\n"
        "        assert window([])\n\n\nTestBox().test_in_class()\n"
    )


CASES = """\
import unittest
from textwrap import indent

WIDTH = 2


class Case(unittest.TestCase):
    \"\"\"Each test reads what setUp made.\"\"\"

    prefix = ">"

    def setUp(self):
        self.text = "a\\nb"

    def expected(self):
        return self.prefix * WIDTH + "a"

    def test_other(self):
        assert self.text

    def test_pad(self):
        self.assertEqual(indent(self.text, self.prefix * WIDTH).split()[0], self.expected() + "!")


class Packaged(unittest.TestCase):
    def setUp(self):
        from . import data  # a script run on its own has no package

    def test_data(self):
        pass
"""


def test_a_test_method_stands_alone_with_its_class_cut_to_what_it_reads() -> None:
    """A unittest method runs through ``debug()`` (setUp first, the exception let through): the
    script really fails with the test's own assertion, and the class keeps only what it reads."""
    script = standalone(CASES, "Case::test_pad")
    assert script is not None
    assert "test_other" not in script and "Each test" not in script and "Packaged" not in script
    assert "WIDTH = 2" in script and 'prefix = ">"' in script and "def expected" in script
    assert script.endswith('\n\n\nCase("test_pad").debug()\n')
    run = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True)
    assert run.returncode == 1
    assert "in test_pad\n" in run.stderr
    assert "\nAssertionError: '>>a' != '>>a!'\n" in run.stderr  # setUp ran: text is "a\nb"
    assert standalone(CASES, "Packaged::test_data") is None
    assert standalone(CASES.replace('"a', '"' + "a" * MAX_CHARS), "Case::test_pad") is None


def _bug(failing: list[str], messages: dict[str, str]) -> Bug:
    return Bug("pkg/core.py", "remove_loop", 0, 42, "", failing, [], messages)


def test_the_statement_quotes_failures_and_pastes_the_first_test_that_stands_alone() -> None:
    failing = [
        "tests/test_core.py::test_fixture",
        "tests/test_core.py::TestBox::test_in_class",
        "tests/test_core.py::test_parametrized[1]",
        *(f"tests/test_core.py::test_{i}" for i in range(3)),
        "tests/test_core.py::test_standalone",
    ]
    messages = {
        failing[0]: "assert <object at 0x7f169f1ccc90> == 1",
        failing[1]: 'File "/testbed/pkg/core.py", line 42, in window',
        failing[2]: "ValueError: see line 42",
    }
    text = problem_statement("acme/widget", _bug(failing, messages), {"tests/test_core.py": TESTS})
    assert text.startswith("Regression in widget: 7 test(s) now fail\n")
    assert "`tests/test_core.py::test_fixture`: assert <object at 0x...> == 1" in text
    assert "- `tests/test_core.py::TestBox::test_in_class`\n" in text  # its message named the file
    assert "- `tests/test_core.py::test_parametrized[1]`\n" in text  # and this one the line
    assert "test_1`" in text and "test_2`" not in text and "... and 2 more" in text
    # a test method stands alone too (test_standalone comes after it)
    assert "it is `tests/test_core.py::TestBox::test_in_class` on its own" in text
    assert reproduction(text) == standalone(TESTS, "TestBox::test_in_class")  # the teacher runs it
    assert not re.search(r"(?<![\w.-])core\.py|line 42", text)
    without = problem_statement("acme/widget", _bug(failing[:3], {}), {})
    assert "```" not in without and "To reproduce" not in without


def test_addresses_are_spelled_one_way_even_where_pytest_cut_the_repr_short() -> None:
    """A repr shortened in the middle ends with an address whose 0x is gone: two runs of the
    same bug must still give the same statement."""
    test = "tests/test_core.py::test_x"
    texts = {
        problem_statement("acme/widget", _bug([test], {test: message}), {})
        for message in (
            "assert [(<test_itert...__no__pad__')] == [(<test_itert...fd60a4c0250>)]",
            "assert [(<test_itert...__no__pad__')] == [(<test_itert...f86e541b890>)]",
        )
    }
    assert len(texts) == 1, texts
    assert "[(<test_itert...0x...>)]" in texts.pop()


def test_demo_statements_never_say_where_the_bug_is() -> None:
    rows = load_instances(DEMO).raise_for_errors()
    reproduced = 0
    for row in rows:
        text = row.problem_statement
        assert "Traceback" not in text, row.instance_id
        for patched in PatchSet(row.patch):
            tail = re.escape(patched.path.rsplit("/", 1)[-1])  # parse.py, or .../itertoolz.py
            assert not re.search(rf"(?<![\w.-]){tail}(?![\w-])", text), row.instance_id
            for hunk in patched:
                for line in range(hunk.source_start, hunk.source_start + hunk.source_length):
                    assert not re.search(rf"\bline {line}\b|\.py:{line}\b", text), row.instance_id
        assert row.FAIL_TO_PASS[0] in text
        reproduced += "```python\n" in text
    assert reproduced >= len(rows) // 2, reproduced  # cachetools' tests are all in classes
