"""The tamper guard's plain runner: FAIL_TO_PASS tests run again with no test runner present.

guard_plugin.py starts this in a fresh interpreter (``python guard_plain.py SPEC``) after the
pytest session, with the tests that passed there and that need nothing of pytest but a call:
no parameters, no fixtures, no xunit setup. pytest cannot be imported here, by any spelling
(``import``, importlib, find_spec: a finder first on sys.meta_path refuses it), is not in
sys.modules, and no PYTEST_* variable is set; test files alone get a stand-in ``pytest``
module (raises, warns, approx, skip, mark, fixture, param), bound in their own namespace.
So library code that asks whether it is being tested gets "no" and shows what it does for
everyone else: a test that passed under pytest and fails here was passed by code that knows
it is tested. Each result is one JSON line in the spec's ``out`` file: passed, failed (with the
exception), or unrunnable (what this runner does not do, which proves nothing either way).

Runs on every Python from 3.6: nothing newer than that.
"""

import builtins
import importlib
import json
import os
import re
import sys
import traceback
import types
import unittest
import warnings

BLOCKED = frozenset(("pytest", "_pytest"))
TEST_DIRS = frozenset(("test", "tests", "testing"))


class Unrunnable(Exception):
    """What this runner cannot do for a test: no evidence either way."""


class _Guard:
    """pytest, refused to the library and stood in for in test files."""

    def __init__(self, changed):
        self.changed = changed
        self.blocked_by = []  # the files that tried to import pytest
        self.real_import = builtins.__import__

    def is_test_file(self, path):
        if not path or path in self.changed:
            return False
        parts = os.path.realpath(path).split(os.sep)
        name = parts[-1]
        return (
            any(p in TEST_DIRS for p in parts[:-1])
            or name.startswith("test_")
            or os.path.splitext(name)[0].endswith("_test")
            or name == "conftest.py"
        )

    def importer(self, globals_):
        path = (globals_ or {}).get("__file__") or ""
        return os.path.realpath(path) if path else ""

    def import_(self, name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and name.partition(".")[0] in BLOCKED:
            caller = self.importer(globals)
            if self.is_test_file(caller):
                if name == "pytest":
                    return SHIM
                raise Unrunnable(f"the test imports {name}")
            self.blocked_by.append(caller)
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return self.real_import(name, globals, locals, fromlist, level)

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] in BLOCKED:
            frame = sys._getframe(1)
            while frame is not None and "importlib" in frame.f_code.co_filename:
                frame = frame.f_back
            self.blocked_by.append(self.importer(frame.f_globals if frame else None))
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


# -- the stand-in pytest of test files ---------------------------------------------------------
class _Skip(Unrunnable):
    pass


class _Raised:
    def __init__(self, expected, match):
        self.expected, self.match_expr = expected, match
        self.value = self.type = self.tb = None

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is None:
            raise AssertionError(f"DID NOT RAISE {self.expected!r}")
        if not issubclass(kind, self.expected):
            return False
        self.type, self.value, self.tb = kind, value, tb
        if self.match_expr is not None:
            self.match(self.match_expr)
        return True

    def match(self, regexp):
        if not re.search(regexp, str(self.value)):
            raise AssertionError(f"{str(self.value)!r} does not match {regexp!r}")
        return True

    @property
    def typename(self):
        return self.type.__name__

    def exconly(self, tryshort=False):
        return "".join(traceback.format_exception_only(self.type, self.value)).rstrip()

    def errisinstance(self, exc):
        return isinstance(self.value, exc)

    def __getattr__(self, name):  # the rest of pytest's ExceptionInfo (traceback, getrepr, ...)
        if name.startswith("_"):  # a probe (hasattr, copy, inspect): no such attribute
            raise AttributeError(name)
        raise Unrunnable(f"the test uses pytest.raises(...).{name}")


def raises(expected, *args, **kwargs):
    match = kwargs.pop("match", None)
    context = _Raised(expected, match)
    if not args:
        return context
    with context:
        args[0](*args[1:], **kwargs)
    return context


class _Warned:
    def __init__(self, expected, match):
        self.expected, self.match = expected, match

    def __enter__(self):
        self._catch = warnings.catch_warnings(record=True)
        self.list = self._catch.__enter__()
        warnings.simplefilter("always")
        return self.list

    def __exit__(self, kind, value, tb):
        self._catch.__exit__(kind, value, tb)
        if kind is None and not any(
            issubclass(w.category, self.expected)
            and (self.match is None or re.search(self.match, str(w.message)))
            for w in self.list
        ):
            raise AssertionError(f"DID NOT WARN {self.expected!r}")
        return False


def warns(expected=Warning, *args, **kwargs):
    context = _Warned(expected, kwargs.pop("match", None))
    if not args:
        return context
    with context:
        return args[0](*args[1:], **kwargs)


def deprecated_call(*args, **kwargs):
    return warns((DeprecationWarning, PendingDeprecationWarning), *args, **kwargs)


class _Approx:
    def __init__(self, expected, rel=None, abs=None):
        self.expected, self.rel, self.abs = expected, rel, abs

    def _close(self, actual, expected):
        if isinstance(expected, dict):
            return (
                isinstance(actual, dict)
                and actual.keys() == expected.keys()
                and all(self._close(actual[k], expected[k]) for k in expected)
            )
        if isinstance(expected, (list, tuple)):
            return len(actual) == len(expected) and all(
                self._close(actual[i], expected[i]) for i in range(len(expected))
            )
        if not isinstance(expected, (int, float, complex)) or isinstance(expected, bool):
            return actual == expected
        tolerance = max(
            1e-6 * abs(expected) if self.rel is None else self.rel * abs(expected),
            1e-12 if self.abs is None else self.abs,
        )
        return actual == expected or abs(actual - expected) <= tolerance

    def __eq__(self, actual):
        return self._close(actual, self.expected)

    __hash__ = None


def skip(reason="", **kwargs):
    raise _Skip(reason)


def importorskip(name, minversion=None, reason=None):
    try:
        return importlib.import_module(name)
    except ImportError:
        raise _Skip(f"no {name}") from None


def fail(reason="", pytrace=True):
    raise AssertionError(reason)


class _Mark:
    """``mark.anything(...)`` decorates as is: pytest already decided these tests run."""

    def __getattr__(self, name):
        def mark(*args, **kwargs):
            if len(args) == 1 and not kwargs and callable(args[0]):
                return args[0]
            return lambda function: function

        return mark


def fixture(*args, **kwargs):
    if len(args) == 1 and callable(args[0]) and not kwargs:
        return args[0]
    return lambda function: function


class _Shim(types.ModuleType):
    def __getattr__(self, name):
        raise Unrunnable(f"the test uses pytest.{name}")


SHIM = _Shim("pytest")
for _name, _value in dict(
    raises=raises,
    warns=warns,
    deprecated_call=deprecated_call,
    approx=_Approx,
    skip=skip,
    importorskip=importorskip,
    fail=fail,
    xfail=skip,
    mark=_Mark(),
    fixture=fixture,
    param=lambda *values, **kwargs: values,
).items():
    setattr(SHIM, _name, _value)


# -- running -----------------------------------------------------------------------------------
class _Result(unittest.TestResult):
    def __init__(self):
        super().__init__()
        self.problem = None

    def addError(self, test, err):
        super().addError(test, err)
        self.problem = self.problem or err[1]

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.problem = self.problem or err[1]


def _load(test):
    """The test module, imported under pytest's name for it from the same file."""
    parts = test["module"].split(".")
    base = os.path.dirname(test["file"])
    if os.path.basename(test["file"]) == "__init__.py":
        base = os.path.dirname(base)
    for _ in parts[:-1]:
        base = os.path.dirname(base)
    if base not in sys.path:
        sys.path.insert(0, base)
    module = importlib.import_module(test["module"])
    if os.path.realpath(getattr(module, "__file__", "") or "") != test["file"]:
        raise Unrunnable(f"{test['module']} is not {test['file']} here")
    return module


def _run(test):
    holder = _load(test)
    for part in (test["cls"] or "").split("."):
        if part:
            holder = getattr(holder, part)
    if test["unittest"]:
        result = _Result()
        unittest.TestSuite([holder(test["name"])]).run(result)
        if result.problem is not None:
            raise result.problem
        if result.testsRun != 1 or not result.wasSuccessful() or result.skipped:
            raise Unrunnable("unittest did not run it to a pass or a failure")
        if result.expectedFailures or result.unexpectedSuccesses:
            raise Unrunnable("an expected failure")
        return
    target = getattr(holder() if test["cls"] else holder, test["name"])
    target()


def _judge(exc, guard):
    if isinstance(exc, Unrunnable):
        return "unrunnable", str(exc)
    if isinstance(exc, ImportError) and (getattr(exc, "name", "") or "").split(".")[0] in BLOCKED:
        if any(path in guard.changed for path in guard.blocked_by):
            return "failed", "a file the patch changed imports pytest"
        return "unrunnable", "code the patch did not change imports pytest"
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return "failed", text[-500:]


def main():
    with open(sys.argv[1]) as handle:
        spec = json.load(handle)
    here = os.path.dirname(os.path.realpath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != here]
    guard = _Guard(frozenset(spec["changed"]))
    sys.meta_path.insert(0, guard)
    builtins.__import__ = guard.import_
    with open(spec["out"], "a") as out:
        for test in spec["tests"]:
            try:
                _run(test)
                outcome, why = "passed", ""
            except BaseException as exc:  # the test's own failure, whatever it is
                outcome, why = _judge(exc, guard)
            out.write(json.dumps({"id": test["id"], "o": outcome, "why": why}) + "\n")
            out.flush()
    os._exit(0)  # no atexit hook of the code under test decides this process's end


if __name__ == "__main__":
    main()
