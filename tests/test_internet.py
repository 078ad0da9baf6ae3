"""The emulated internet of offline test sandboxes: the real starter, real httpbin under gunicorn
and gevent, real certificates from openssl, in a real sandbox on the host's root (loopback only:
nothing leaves the sandbox's network namespace)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from sweflow.harness import internet
from sweflow.harness.evalscript import make_eval_script
from sweflow.harness.specs import EnvSpec
from sweflow.instances import Instance
from sweflow.sandbox import Bind, SandboxSpec, open_sandbox

HOSTS = ["httpbin.org", "www.google.co.uk"]
# Run inside the sandbox after the starter's exports: what requests' suite relies on.
PROBE = r"""
import json, os, time, requests
out = {}
r = requests.get("https://httpbin.org/get?x=1")
out["https"] = [r.status_code, r.json()["args"], r.headers.get("Connection")]
r = requests.get("http://httpbin.org/redirect-to", params={"url": "http://www.google.co.uk/get"})
out["redirect"] = [r.status_code, r.url]
r = requests.post("http://httpbin.org/post", data=iter([b"ab", b"cd"]))
out["chunked_upload"] = r.json()["data"]
for name, url, timeout in [("unknown_name", "http://doesnotexist.google.com", 5),
                           ("unrouted", "http://10.255.255.1", (0.3, None)),
                           ("closed_port", "http://httpbin.org:1", 5)]:
    start = time.monotonic()
    try:
        requests.get(url, timeout=timeout)
        out[name] = ["answered"]
    except requests.RequestException as exc:
        out[name] = [type(exc).__name__, round(time.monotonic() - start, 1)]
try:
    requests.get("https://httpbin.org/get", verify=requests.certs.where())
    out["untrusted"] = "accepted"
except requests.exceptions.SSLError:
    out["untrusted"] = "refused"
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def service_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The layer's files (starter, CA, certificate), made by the build's own commands."""
    folder = tmp_path_factory.mktemp("internet")
    script = "set -euo pipefail\n" + internet.certificate_commands(HOSTS)
    subprocess.run(["bash", "-c", script], cwd=folder, check=True, capture_output=True)
    (folder / "emulated_internet.py").write_text(internet.start_script())
    return folder


def test_the_emulated_internet_serves_its_hosts_and_nothing_else(service_dir: Path) -> None:
    files = sorted(p.name for p in service_dir.iterdir())  # the CA's key is gone
    assert files == ["ca.pem", "emulated_internet.py", "server.key", "server.pem"]
    python = sys.executable  # the suite's venv: httpbin[mainapp] is a test dependency
    start = internet.start_command(HOSTS).replace(f"{internet.PREFIX}/bin/python", python)
    # The host's root hides /root and /tmp, where the venv and its interpreter may live.
    prefixes = {Path(sys.prefix), Path(sys.base_prefix)}
    spec = SandboxSpec(
        layers=[Path("/")],
        binds=[
            Bind(source=service_dir, target=internet.PREFIX),
            *(Bind(source=p, target=str(p)) for p in sorted(prefixes)),
        ],
        network=False,
    )
    with open_sandbox(spec) as sandbox:
        sandbox.write("/tmp/probe.py", PROBE)
        result = sandbox.exec(f"{start} && {python} /tmp/probe.py", timeout=120)
        assert result.exit_code == 0, result.output
        again = sandbox.exec(f"{start} && echo $REQUESTS_CA_BUNDLE", timeout=60)
    seen = json.loads(result.output.strip().splitlines()[-1])
    assert seen["https"] == [200, {"x": "1"}, "keep-alive"]  # as httpbin.org answered
    assert seen["redirect"] == [200, "http://www.google.co.uk/get"]
    assert seen["chunked_upload"] == "abcd"
    assert seen["unknown_name"][0] == "ConnectionError" and seen["unknown_name"][1] < 2
    assert seen["unrouted"][0] == "ConnectTimeout"  # dropped, as behind a firewall
    assert seen["closed_port"][0] == "ConnectionError" and seen["closed_port"][1] < 2
    assert seen["untrusted"] == "refused"  # only the build's CA vouches for these names
    # A second start in the same sandbox (a re-run) finds it running and trusts it again.
    assert again.ok and again.output.strip().endswith(f"{internet.PREFIX}/ca.pem")


def test_an_eval_script_starts_it_before_anything_else_runs() -> None:
    instance = Instance(
        instance_id="psf__requests-1", repo="psf/requests", base_commit="a" * 40,
        version="2.0", test_patch="",
    )  # fmt: skip
    online = EnvSpec(python="3.9", test_cmd="pytest", emulated_hosts=HOSTS,
                     eval_commands=["export X=1"])  # fmt: skip
    script = make_eval_script(instance, online).splitlines()
    start = internet.start_command(HOSTS)
    assert start in script and script.index(start) < script.index("export X=1")
    offline = online.model_copy(update={"emulated_hosts": []})
    assert not any("emulated_internet" in line for line in make_eval_script(instance, offline))


def test_the_layer_key_follows_what_it_is_made_of() -> None:
    first = internet.recipe("/usr/bin/python3.9", HOSTS)
    assert first == internet.recipe("/usr/bin/python3.9", list(HOSTS))
    assert first != internet.recipe("/usr/bin/python3.11", HOSTS)
    assert first != internet.recipe("/usr/bin/python3.9", HOSTS[:1])


@pytest.mark.parametrize("host", ["", "a b", "x';rm -rf /'", "-x.org"])
def test_a_host_that_is_not_a_dns_name_is_refused_with_the_field_named(host: str) -> None:
    with pytest.raises(ValidationError, match="emulated_hosts"):
        EnvSpec(python="3.9", emulated_hosts=["httpbin.org", host])
