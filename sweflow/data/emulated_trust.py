"""The emulated internet's CA among the public roots, for the test suite's Python processes.

On the real internet httpbin.org's certificate chains to a public root that every bundle of
public roots holds: the system's, certifi's, and the ``cacert.pem`` old requests releases bundle
(their ``Session.send`` verifies with that file alone: REQUESTS_CA_BUNDLE only reaches
``Session.request``). In a test sandbox the emulated hosts' CA stands for that root, so this
module, on PYTHONPATH as ``sitecustomize`` in the test sandbox only, makes every bundle of public
roots that Python's ssl loads trust it too. A file of a project's own test CAs (fewer than
``PUBLIC_ROOTS`` certificates) is loaded as it is, and no file changes: the checkout, its diff
and the installed packages stay as they are. The ``sitecustomize`` it shadows, if any, runs next.

Python 3.6 syntax: it runs in the suite's interpreter.
"""

import importlib.machinery
import importlib.util
import os
import ssl
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CA = os.path.join(os.path.dirname(HERE), "ca.pem")
PUBLIC_ROOTS = 20  # certificates in a bundle of public roots (certifi's and requests' hold 100+)

_load = ssl.SSLContext.load_verify_locations


def _public_roots(cafile):
    try:
        with open(cafile, "rb") as f:
            return f.read().count(b"-----BEGIN CERTIFICATE-----") >= PUBLIC_ROOTS
    except (OSError, TypeError, ValueError):
        return False


def load_verify_locations(self, cafile=None, capath=None, cadata=None):
    _load(self, cafile, capath, cadata)
    if cafile is not None and _public_roots(cafile):
        _load(self, CA)


def _run_the_shadowed_one():
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


ssl.SSLContext.load_verify_locations = load_verify_locations
_run_the_shadowed_one()
