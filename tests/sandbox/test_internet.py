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

HOSTS = ["httpbin.org", "www.google.co.uk", "www.sphinx-doc.org"]  # the last: a recorded site
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
# a recorded site: its pages, a 404 for any other path (HEAD too), httpbin not behind it
page = "https://www.sphinx-doc.org/en/1.4.8/tutorial.html"
out["site"] = [requests.get(page).status_code, 'id="install-sphinx"' in requests.get(page).text,
               requests.head(page).status_code, requests.get(page[:-13] + "nope.html").status_code,
               requests.head("https://www.sphinx-doc.org/get").status_code]
# what requests' own bundle of public roots trusts (old releases' Session.send uses only it)
prepared = requests.Request("GET", "https://httpbin.org/get").prepare()
out["bundled_roots"] = requests.Session().send(prepared).status_code
with open(requests.certs.where()) as f:
    roots = f.read()
out["bundle_untouched"] = open(os.environ["REQUESTS_CA_BUNDLE"]).read() not in roots
with open("/tmp/one-root.pem", "w") as f:  # a project's own CA file: one unrelated root
    f.write(roots[roots.index("-----BEGIN"):roots.index("-----END CERTIFICATE-----") + 25])
for name, url, verify in [("own_ca_file", "https://httpbin.org/get", "/tmp/one-root.pem"),
                          ("wrong_name", "https://127.0.0.1/get", True)]:
    try:
        requests.get(url, verify=verify)
        out[name] = "accepted"
    except requests.exceptions.SSLError:
        out[name] = "refused"
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def service_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The layer's files (starter, CA, certificate), made by the build's own commands."""
    folder = tmp_path_factory.mktemp("internet")
    script = "set -euo pipefail\n" + internet.certificate_commands(HOSTS)
    subprocess.run(["bash", "-c", script], cwd=folder, check=True, capture_output=True)
    for path, data in internet.layer_files(HOSTS).items():
        target = folder / Path(path).relative_to(internet.PREFIX)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return folder


@pytest.mark.isolating  # opens a local sandbox itself
def test_the_emulated_internet_serves_its_hosts_and_nothing_else(service_dir: Path) -> None:
    files = sorted(p.name for p in service_dir.iterdir())  # the CA's key is gone
    assert files == [
        "ca.pem",
        "emulated_internet.py",
        "emulated_sites.py",
        "server.key",
        "server.pem",
        "sites",
        "trust",
    ]
    assert [p.name for p in (service_dir / "sites").iterdir()] == ["www.sphinx-doc.org"]
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
    assert seen["site"] == [200, True, 200, 404, 404]
    assert seen["unknown_name"][0] == "ConnectionError" and seen["unknown_name"][1] < 2
    assert seen["unrouted"][0] == "ConnectTimeout"  # dropped, as behind a firewall
    assert seen["closed_port"][0] == "ConnectionError" and seen["closed_port"][1] < 2
    # the CA stands for a public root: bundles of them trust it (no file changed), a project's
    # own CA file does not, and names are checked
    assert seen["bundled_roots"] == 200 and seen["bundle_untouched"]
    assert seen["own_ca_file"] == "refused" and seen["wrong_name"] == "refused"
    # A second start in the same sandbox (a re-run) finds it running and trusts it again.
    assert again.ok and again.output.strip().endswith(f"{internet.PREFIX}/ca.pem")


def test_an_eval_script_starts_it_before_anything_else_runs() -> None:
    instance = Instance(
        instance_id="psf__requests-1",
        repo="psf/requests",
        base_commit="a" * 40,
        version="2.0",
        test_patch="",
    )
    online = EnvSpec(
        python="3.9", test_cmd="pytest", emulated_hosts=HOSTS, eval_commands=["export X=1"]
    )
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


def test_the_trust_hook_runs_the_sitecustomize_it_shadows(tmp_path: Path) -> None:
    """On PYTHONPATH before the interpreter's own ``sitecustomize`` (Debian's, a project's), the
    hook wraps ssl's loading of CA files and then runs that one."""
    hook, shadowed = tmp_path / "trust", tmp_path / "theirs"
    hook.mkdir(), shadowed.mkdir()
    (hook / "sitecustomize.py").write_bytes(internet.layer_files([])[internet.TRUST_HOOK])
    (shadowed / "sitecustomize.py").write_text("import os\nos.environ['THEIRS'] = 'ran'\n")
    check = (
        "import os, ssl, sitecustomize; "
        "print(os.environ.get('THEIRS'), ssl.SSLContext.load_verify_locations.__module__, "
        "sitecustomize.__file__)"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{hook}:{shadowed}"}
    out = subprocess.run(
        [sys.executable, "-c", check], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["ran", "sitecustomize", str(shadowed / "sitecustomize.py")]


def test_an_instance_stored_on_another_emulated_internet_is_built_again() -> None:
    """Its manifest records what the layer holds (starter, trust hook, packages, certificates'
    recipe); one stored before that was recorded lacks the trust hook, so it is stale too."""
    from sweflow.envcache.freshness import build_record, stale
    from sweflow.envcache.records import Manifest

    row = Instance(
        instance_id="psf__requests-1921", repo="psf/requests", base_commit="c" * 40, version="2.3"
    )
    spec = EnvSpec(python="3.9", test_cmd="pytest -rA", emulated_hosts=HOSTS)
    now = build_record(row, spec, "r")
    assert now["internet"] == internet.contents(HOSTS) != internet.contents(HOSTS[:1])

    def stored(**meta) -> Manifest:
        return Manifest(instance_id=row.instance_id, layers=[], meta=meta, created="now")

    assert stale(stored(**now), now) is None
    before = {key: value for key, value in now.items() if key != "internet"}
    assert f"internet none -> {now['internet'][:12]}" in stale(stored(**before), now)
    older = {**now, "internet": internet.contents(HOSTS[:1])}
    assert "internet " in stale(stored(**older), now)
    offline = build_record(row, spec.model_copy(update={"emulated_hosts": []}), "r")
    assert "internet" not in offline and stale(stored(**offline), offline) is None
