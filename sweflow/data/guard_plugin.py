"""The tamper guard inside the test run: a pytest plugin the grader loads before anything else.

sweflow.grading.guard.run writes this file into the sandbox for one grading (CONFIG filled in,
under a random name outside the repository) and runs the eval script with ``-p <name>`` in
PYTEST_ADDOPTS, so pytest imports it while parsing its arguments: before entry-point plugins,
conftest files and the code under test. It judges nothing; it writes facts, one line each
(``NONCE KIND repr(payload)``), to a file the grader reads after the run:

- ``test``: each test's outcome as pytest's runner produced it: the exception of its setup and
  call phases, taken from the CallInfo by the first hook wrapper, before any other hook sees it
  (so a hook or report class that rewrites outcomes changes the log, not this);
- ``hooks``: where the hook functions of every plugin registered after this one are defined;
- ``changed``: what of pytest, pluggy, unittest and the builtins is not the same object at the
  end of the run as when this plugin loaded, and where the replacement is defined;
- ``swapped``: a test whose function or code changed between collection and its run;
- ``plain``: the FAIL_TO_PASS tests that passed, run again by guard_plain.py in a fresh
  interpreter that has no test runner in it;
- ``start``/``end``: each session's beginning and end.

It must load on every pytest the datasets pin (3.x to 8.x) and every Python from 3.6: no
syntax or library newer than that, and nothing that can fail the run it watches.
"""

import os
import signal
import subprocess
import sys
import types

import pytest

CONFIG = {}  # the grader's: nonce, records, home, plain, fail_to_pass, repo, changed

_write = os.write
_NONCE = CONFIG.get("nonce", "")
_FD = None
if CONFIG:
    _FD = os.open(
        CONFIG["records"],
        os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0),
        0o600,
    )
_CWD = os.getcwd()
_XFAILED = pytest.xfail.Exception
_SKIPPED = pytest.skip.Exception
_F2P = frozenset(CONFIG.get("fail_to_pass", ()))
_CHANGED = sorted(set(os.path.realpath(p) for p in CONFIG.get("changed", ())))
_RUNNER_DIRS = tuple(
    os.path.dirname(os.path.realpath(m.__file__)) + os.sep
    for m in (sys.modules.get("_pytest"), sys.modules.get("pluggy"))
    if m is not None and getattr(m, "__file__", None)
)
# What the test runner's results are made of: compared, object for object, at the end.
WATCHED = (
    "builtins",
    "os",
    "subprocess",
    "unittest",
    "unittest.case",
    "unittest.result",
    "unittest.suite",
    "pytest",
    "_pytest.reports",
    "_pytest.runner",
    "_pytest.outcomes",
    "_pytest.skipping",
    "_pytest.terminal",
    "_pytest.python",
    "_pytest.unittest",
    "_pytest.main",
    "_pytest.nodes",
    "_pytest.fixtures",
    "_pytest.capture",
    "_pytest.warnings",
    "_pytest.config",
    "_pytest.assertion",
    "_pytest.assertion.rewrite",
    "_pytest.assertion.util",
    "pluggy",
    "pluggy._callers",
    "pluggy._hooks",
    "pluggy._manager",
    "pluggy._result",
    "pluggy.callers",
    "pluggy.hooks",
    "pluggy.manager",
)
_OPEN_MODULES = frozenset(("builtins", "os", "subprocess"))
_SKIP_KEYS = frozenset(
    (
        "__dict__",
        "__weakref__",
        "__doc__",
        "__module__",
        "__qualname__",
        "__annotations__",
        "__slots__",
        "__abstractmethods__",
        "_abc_impl",
        "__parameters__",
        "__orig_bases__",
    )
)


def _emit(kind, payload):
    if _FD is None:
        return
    line = f"{_NONCE} {kind} {payload!r}\n"
    _write(_FD, line.encode("utf-8", "backslashreplace"))


def _scrub_environment():
    """Leave no trace of this plugin for the tests: not in PYTEST_ADDOPTS, PYTHONPATH or
    sys.path (children of the run do not load it, and see the environment they would)."""
    words = os.environ.get("PYTEST_ADDOPTS", "").split()
    for i in range(len(words) - 1):
        if words[i] == "-p" and words[i + 1] == __name__:
            del words[i : i + 2]
            break
    _set_env("PYTEST_ADDOPTS", " ".join(words))
    home = CONFIG["home"]
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != home]
    _set_env("PYTHONPATH", os.pathsep.join(paths))
    sys.path[:] = [p for p in sys.path if p != home]


def _set_env(name, value):
    if value:
        os.environ[name] = value
    else:
        os.environ.pop(name, None)


# -- where code comes from ---------------------------------------------------------------------
def _code_of(value):
    """The function behind a value (methods, properties, partials, callables), or None."""
    for _ in range(4):
        if isinstance(value, (classmethod, staticmethod)):
            value = value.__func__
        elif isinstance(value, property):
            value = value.fget
        elif isinstance(value, types.MethodType):
            value = value.__func__
        elif callable(getattr(value, "func", None)):  # functools.partial
            value = value.func
        else:
            break
    if isinstance(value, types.FunctionType):
        return value
    call = type(value).__call__ if callable(value) else None
    return call if isinstance(call, types.FunctionType) else None


def _origin(value):
    """The file that defines ``value``: a function's code file, a class's module file; None
    when it has none (built at run time from a string, a builtin, a removed name)."""
    if isinstance(value, type):
        module = sys.modules.get(getattr(value, "__module__", ""), None)
        path = getattr(module, "__file__", None)
    elif isinstance(value, types.ModuleType):
        path = getattr(value, "__file__", None)
    else:
        function = _code_of(value)
        path = function.__code__.co_filename if function is not None else None
    if not path or not os.path.isabs(path) or not os.path.isfile(path):
        return None
    return os.path.realpath(path)


def _fingerprint(value):
    function = _code_of(value)
    code = function.__code__ if function is not None else None
    attributes = sorted(vars(value).items()) if isinstance(value, types.FunctionType) else ()
    return (value, code) + tuple(v for _, v in attributes)  # e.g. pytest.skip.Exception


def _same(a, b):
    return len(a) == len(b) and all(a[i] is b[i] for i in range(len(a)))


# -- the snapshot of the runner ----------------------------------------------------------------
_SNAPSHOT = {}
_MODULES = {}


def _take_snapshot():
    """Record every watched module's callables (and its own classes' attributes) not yet seen:
    at load, and again for modules first imported later."""
    for name in WATCHED:
        module = sys.modules.get(name)
        if module is None or name in _MODULES:
            continue
        _MODULES[name] = module
        for key, value in list(vars(module).items()):
            _snapshot_value(name, key, value)


def _snapshot_value(module_name, key, value):
    if key.startswith("__") or isinstance(value, types.ModuleType) or not callable(value):
        return
    where = module_name + "." + key
    _SNAPSHOT[where] = _fingerprint(value)
    if isinstance(value, type) and module_name != "builtins" and value.__module__ == module_name:
        for attr, member in list(vars(value).items()):
            if _is_behaviour(attr, member):
                _SNAPSHOT[where + "." + attr] = _fingerprint(member)


def _is_behaviour(attr, member):
    """A class attribute that is code (a method, property or other descriptor), not data a
    class keeps for itself while it runs."""
    return attr not in _SKIP_KEYS and (callable(member) or hasattr(type(member), "__get__"))


def _changes():
    """(name, origin of what is there now) for each snapshotted object replaced or removed,
    each attribute added to a watched class, and each watched module replaced."""
    now = {}
    for name, module in _MODULES.items():
        if sys.modules.get(name) is not module:
            now[name] = ("module", sys.modules.get(name))
        for key, value in list(vars(module).items()):
            if key.startswith("__") or isinstance(value, types.ModuleType) or not callable(value):
                continue
            where = name + "." + key
            if where not in _SNAPSHOT and name in _OPEN_MODULES:
                continue  # a new name there shadows nothing pytest looks up
            now[where] = ("value", value)
            snapshot_class = isinstance(value, type) and name != "builtins"
            if snapshot_class and value.__module__ == name:
                for attr, member in list(vars(value).items()):
                    if _is_behaviour(attr, member):
                        now[where + "." + attr] = ("value", member)
    changed = []
    for where, (kind, value) in sorted(now.items()):
        if kind == "module":
            changed.append((where, _origin(value)))
        elif where not in _SNAPSHOT or not _same(_SNAPSHOT[where], _fingerprint(value)):
            changed.append((where, _origin(value)))
    changed.extend((where, None) for where in sorted(set(_SNAPSHOT) - set(now)))
    return changed


# -- the tests ---------------------------------------------------------------------------------
_TESTS = {}  # nodeid -> (fingerprint at collection, item)
_PLAIN = []  # the FAIL_TO_PASS tests to run again without pytest
_DURATION = [0.0]


def _relative(item):
    try:
        return item.config.cwd_relative_nodeid(item.nodeid)
    except Exception:
        return item.nodeid


def _is_f2p(nodeid):
    words = nodeid.split()
    return nodeid in _F2P or (words and (words[0] in _F2P or " ".join(words) in _F2P))


def _test_object(item):
    cls = getattr(item, "cls", None)
    if cls is not None:
        return getattr(cls, getattr(item, "originalname", None) or item.name, None)
    return getattr(item, "obj", None)


def _marked(item, name):
    closest = getattr(item, "get_closest_marker", None)
    if closest is not None:
        return closest(name) is not None
    return bool(getattr(item, "get_marker", lambda n: None)(name))


def _plain_spec(item, nodeid):
    """How guard_plain.py runs this test, or None where pytest gives it more than a plain call
    would (parameters, fixtures, xunit setup, an xfail mark, a coroutine or a generator)."""
    if getattr(item, "callspec", None) is not None or _marked(item, "xfail"):
        return None
    own = ("_unittest_setUpClass_fixture_", "_unittest_skip_fixture_")
    fixtures = [n for n in getattr(item, "fixturenames", ()) if not n.startswith(own)]
    arguments = getattr(getattr(item, "_fixtureinfo", None), "argnames", ())
    if arguments or [n for n in fixtures if n != "request"]:
        return None
    module, cls = getattr(item, "module", None), getattr(item, "cls", None)
    function = _test_object(item)
    flags = getattr(getattr(function, "__code__", None), "co_flags", 0x20)
    if module is None or not getattr(module, "__file__", None) or flags & (0x20 | 0x80 | 0x200):
        return None  # a generator, a coroutine or an async generator
    import unittest

    return {
        "id": nodeid,
        "module": module.__name__,
        "file": os.path.realpath(module.__file__),
        "cls": cls.__qualname__ if cls is not None else None,
        "name": getattr(item, "originalname", None) or item.name,
        "unittest": bool(cls is not None and issubclass(cls, unittest.TestCase)),
    }


def _frames(excinfo):
    files, tb = [], getattr(excinfo, "tb", None)
    while tb is not None and len(files) < 64:
        path = tb.tb_frame.f_code.co_filename
        if path not in files:
            files.append(path)
        tb = tb.tb_next
    return [os.path.realpath(p) if os.path.isabs(p) else p for p in files]


def _observe(item, call):
    when = call.when
    if when not in ("setup", "call"):
        return
    nodeid = _relative(item)
    if when == "call":
        known = _TESTS.get(item.nodeid)
        now = _fingerprint(_test_object(item))
        if known is not None and not _same(known, now):
            _emit("swapped", {"id": nodeid, "origin": _origin(now[0])})
    excinfo = call.excinfo
    if excinfo is None:
        if when == "call":
            _record(item, nodeid, "passed", call, [])
        return
    via = []
    if issubclass(excinfo.type, _XFAILED):  # pytest.xfail() called: by whom is in its frames
        outcome, via = "xfailed", _frames(excinfo)
    elif issubclass(excinfo.type, _SKIPPED):
        outcome = "skipped"
    elif when == "setup":
        outcome = "error"
    else:
        outcome = "xfailed" if _marked(item, "xfail") else "failed"
    _record(item, nodeid, outcome, call, via)


def _record(item, nodeid, outcome, call, via):
    _emit("test", {"id": nodeid, "o": outcome, "via": via})
    if outcome == "passed" and _is_f2p(nodeid):
        spec = _plain_spec(item, nodeid)
        if spec is not None:
            _PLAIN.append(spec)
            _DURATION[0] += float(getattr(call, "stop", 0) - getattr(call, "start", 0))


def _hook_origins(plugin):
    origins = set()
    for name in dir(plugin):
        if name.startswith("pytest_"):
            try:
                value = getattr(plugin, name)
            except Exception:
                continue
            if callable(value):
                origins.add((name, _origin(value)))
    return origins


def _report_hooks(origins):
    shown = sorted(
        (n, o)
        for n, o in origins
        if o is None or not o.startswith(_RUNNER_DIRS + (CONFIG["home"],))
    )
    if shown:
        _emit("hooks", shown)


# -- pytest's hooks ----------------------------------------------------------------------------
def pytest_plugin_registered(plugin, manager):
    try:
        _report_hooks(_hook_origins(plugin))
    except Exception as exc:  # a fact lost, never a run broken
        _emit("fault", f"plugin_registered: {exc!r}")


def pytest_sessionstart(session):
    _take_snapshot()
    pytest_module = sys.modules.get("_pytest")
    runner_file = os.path.realpath(getattr(pytest_module, "__file__", "") or "")
    repo = os.path.realpath(CONFIG["repo"]) + os.sep
    _emit(
        "start",
        {
            "pid": os.getpid(),
            "runner_in_repo": runner_file.startswith(repo),
            "pytest": getattr(pytest, "__version__", ""),
            "changed": _CHANGED,
        },
    )


def pytest_collection_finish(session):
    for item in getattr(session, "items", ()):
        _TESTS[item.nodeid] = _fingerprint(_test_object(item))


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """The outermost wrapper: the phase's exception once pytest's own implementations have
    set it (its unittest support moves a TestCase's failure there), whatever any report says."""
    yield
    try:
        _observe(item, call)
    except Exception as exc:
        _emit("fault", f"makereport: {exc!r}")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    yield
    try:
        _run_plain()
        origins = set()
        for caller in list(vars(session.config.pluginmanager.hook).values()):
            for impl in getattr(caller, "get_hookimpls", lambda: [])():
                origins.add((getattr(caller, "name", "?"), _origin(impl.function)))
        _report_hooks(origins)
        _emit("changed", _changes())
    except Exception as exc:
        _emit("fault", f"sessionfinish: {exc!r}")
    finally:
        _emit("end", {"pid": os.getpid()})


def _run_plain():
    """The FAIL_TO_PASS tests that passed, again, in a fresh interpreter with no test runner:
    code that behaves differently when it is tested shows here."""
    if not _PLAIN:
        return
    import json

    stamp = f"{os.getpid()}-{len(_PLAIN)}"
    spec_path = os.path.join(CONFIG["home"], f"plain-{stamp}.json")
    out_path = os.path.join(CONFIG["home"], f"plain-{stamp}.out")
    with open(spec_path, "w") as spec:
        json.dump({"tests": _PLAIN, "changed": _CHANGED, "out": out_path}, spec)
    _emit("plain_start", [test["id"] for test in _PLAIN])
    env = dict((k, v) for k, v in os.environ.items() if not k.startswith(("PYTEST_", "_PYTEST")))
    timeout = 60 + 5 * _DURATION[0]
    with open(out_path + ".err", "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, CONFIG["plain"], spec_path],
            cwd=_CWD,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
            close_fds=True,
        )
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait()
            _emit("plain_end", {"exit": None, "timeout": timeout})
        else:
            _emit("plain_end", {"exit": code, "timeout": None})
    try:
        with open(out_path) as out:
            for line in out:
                _emit("plain", json.loads(line))
    except (OSError, ValueError) as exc:
        _emit("fault", f"plain results: {exc!r}")
    try:
        with open(out_path + ".err", "rb") as err:
            tail = err.read()[-1500:].decode("utf-8", "replace")
        if code:
            _emit("plain_stderr", tail)
    except OSError:
        pass


if CONFIG:
    _scrub_environment()
    _take_snapshot()
