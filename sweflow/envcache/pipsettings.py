"""The host's pip settings, carried into a networked build sandbox.

A build that installs from an index sees the host's index, proxy and CA as pip on the host
would; an offline build (a wheelhouse) needs none of them.
"""

from __future__ import annotations

import os
from pathlib import Path

from sweflow.envcache import pypi_cutoff
from sweflow.sandbox import Bind

PIP_PASSTHROUGH = (
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_TRUSTED_HOST",
    "PIP_DEFAULT_TIMEOUT",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
)
SANDBOX_CA = "/etc/sweflow/host-ca.pem"


def host_pip_settings() -> tuple[list[Bind], dict[str, str]]:
    """The host's index, proxy and CA settings for pip in a networked build sandbox.

    Behind a proxy that re-signs TLS, the base layer's CA bundle does not know the proxy's CA:
    the host's bundle is bound read-only into the sandbox and pip is pointed at it.
    """
    env = {k: os.environ[k] for k in PIP_PASSTHROUGH if os.environ.get(k)}
    ca = pypi_cutoff.host_ca_file()
    if ca is None:
        return [], env
    env.update(PIP_CERT=SANDBOX_CA, REQUESTS_CA_BUNDLE=SANDBOX_CA, SSL_CERT_FILE=SANDBOX_CA)
    return [Bind(source=Path(ca), target=SANDBOX_CA)], env
