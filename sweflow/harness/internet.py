"""An emulated internet for test suites that call public hosts, in sandboxes that have none.

The harness runs requests' suite online: its tests fetch httpbin.org over HTTP and HTTPS, follow
redirects to other hosts, and expect a connection to an unrouted address to time out. Test
sandboxes here are offline, so a spec's ``emulated_hosts`` get a layer of their own (a venv with
httpbin, the software httpbin.org runs, and a CA and certificate made at build time for those
names) and the eval script starts it before the tests: the names resolve to a local server on
ports 80 and 443, others fail to resolve, other addresses drop packets
(``sweflow/data/emulated_internet.py`` says how), and the CA is trusted wherever a public root
would be (``sweflow/data/emulated_trust.py``: the bundle old requests releases carry, too).
A name with a recorded site (``sweflow/data/sites/<host>/``: the pages Sphinx's linkcheck and
remote-image tests check) serves its files, any other answers as httpbin.org
(``sweflow/data/emulated_sites.py``). Nothing leaves the sandbox.
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Sequence
from importlib import resources
from importlib.resources.abc import Traversable

PREFIX = "/opt/sweflow/internet"
# What httpbin.org serves, and how (gunicorn with gevent workers: the extra "mainapp"), pinned
# to the harness era's releases: gunicorn 23 needs a gevent that, before Python 3.12, needs the
# greenlet 3 that httpbin excludes.
PACKAGES = ("httpbin[mainapp]==0.10.2", "gunicorn==22.0.0", "gevent<24")
START_SCRIPT = f"{PREFIX}/emulated_internet.py"
TRUST_HOOK = f"{PREFIX}/trust/sitecustomize.py"  # on the tests' PYTHONPATH (emulated_trust.py)
SOURCES = {  # the layer's own files from sweflow/data, by where they go
    START_SCRIPT: "emulated_internet.py",
    f"{PREFIX}/emulated_sites.py": "emulated_sites.py",  # what the servers run
    TRUST_HOOK: "emulated_trust.py",
}
CERT_DAYS = 36500  # the layer outlives any ordinary certificate lifetime


def layer_files(hosts: Sequence[str]) -> dict[str, bytes]:
    """The files the layer holds beside its venv and certificates, by their path in it: the
    starter, the servers' app, the trust hook and the recorded sites of ``hosts``."""
    data = resources.files("sweflow.data")
    files = {target: data.joinpath(name).read_bytes() for target, name in SOURCES.items()}
    for host in hosts:
        files.update(_site_files(data.joinpath("sites", host), f"{PREFIX}/sites/{host}"))
    return files


def _site_files(folder: Traversable, target: str) -> dict[str, bytes]:
    if not folder.is_dir():
        return {}
    files: dict[str, bytes] = {}
    for entry in folder.iterdir():
        path = f"{target}/{entry.name}"
        files.update(_site_files(entry, path) if entry.is_dir() else {path: entry.read_bytes()})
    return files


def recipe(python: str, hosts: Sequence[str]) -> str:
    """What the layer is made of, for its key: the build step and the files it holds."""
    return _digest(build_script(python, hosts), *_file_digests(hosts))


def contents(hosts: Sequence[str]) -> str:
    """What the layer holds, whatever the interpreter: an instance stored on another (an older
    starter, no trust hook, other pages) is built again (sweflow.envcache.freshness)."""
    return _digest(*PACKAGES, certificate_commands(hosts), *_file_digests(hosts))


def _file_digests(hosts: Sequence[str]) -> list[str]:
    files = layer_files(hosts)
    return [f"{path} {hashlib.sha256(files[path]).hexdigest()}" for path in sorted(files)]


def _digest(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def build_script(python: str, hosts: Sequence[str]) -> str:
    """The build step (networked, as every build): the venv, then the certificates."""
    return "\n".join(
        [
            "set -euxo pipefail",
            f"{python} -m venv {PREFIX}",
            f"{PREFIX}/bin/python -m pip install " + " ".join(map(shlex.quote, PACKAGES)),
            f"{PREFIX}/bin/python -c 'import httpbin, gunicorn, gevent'",
            f"cd {PREFIX}",
            certificate_commands(hosts),
        ]
    )


def certificate_commands(hosts: Sequence[str]) -> str:
    """Shell that writes ``ca.pem`` and, signed by it, ``server.pem`` + ``server.key`` for every
    host into the current directory, then throws the CA's key away (it signs nothing more).

    Both come from requests and extension files: ``req -x509`` would add its config's defaults,
    and OpenSSL 1.1 rejects a CA whose basicConstraints then appear twice.
    """
    ca_ext = "\\n".join(
        [
            "basicConstraints=critical,CA:TRUE",
            "keyUsage=critical,keyCertSign,cRLSign",
            "subjectKeyIdentifier=hash",
        ]
    )
    leaf_ext = "\\n".join(
        [
            "subjectAltName=" + ",".join(f"DNS:{h}" for h in hosts),
            "basicConstraints=critical,CA:FALSE",
            "keyUsage=critical,digitalSignature,keyEncipherment",
            "extendedKeyUsage=serverAuth",
            "authorityKeyIdentifier=keyid",
            "subjectKeyIdentifier=hash",
        ]
    )
    return "\n".join(
        [
            "openssl req -newkey rsa:2048 -nodes -subj '/CN=sweflow emulated internet CA'"
            " -keyout ca.key -out ca.csr",
            f"printf '{ca_ext}\\n' > ca.ext",
            f"openssl x509 -req -in ca.csr -signkey ca.key -days {CERT_DAYS} -extfile ca.ext"
            " -out ca.pem",
            f"openssl req -newkey rsa:2048 -nodes -subj /CN={shlex.quote(hosts[0])}"
            " -keyout server.key -out server.csr",
            f"printf '{leaf_ext}\\n' > server.ext",
            "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial"
            f" -days {CERT_DAYS} -extfile server.ext -out server.pem",
            "openssl verify -CAfile ca.pem server.pem",
            "rm -f ca.key ca.csr ca.ext ca.srl server.csr server.ext",
        ]
    )


def start_command(hosts: Sequence[str]) -> str:
    """The eval script's line: start it and trust its CA (REQUESTS_CA_BUNDLE, SSL_CERT_FILE,
    and the trust hook on PYTHONPATH)."""
    names = " ".join(shlex.quote(h) for h in hosts)
    return f'eval "$({PREFIX}/bin/python {START_SCRIPT} {names})"'
