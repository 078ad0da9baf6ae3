"""``pypi_cutoff``: a build's pip resolves as of a date through sweflow's loopback index.

The upstream is a PEP 691 index served on loopback by the test (tests send nothing further):
the wheelhouse's pip, setuptools and wheel, and two releases of a probe package built here,
1.0 "uploaded" in 2024 and 2.0 in 2025. A real pip asks sweflow's index, and a real build
sandbox (sharing the host's network during builds) installs from it.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import date
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sweflow.envcache.builder import BuildOptions, EnvBuilder
from sweflow.envcache.pypi_cutoff import html_page, kept_files, shared_index
from sweflow.envcache.store import LayerStore
from sweflow.harness.specs import EnvSpec, SpecTable
from sweflow.instances import load_instances

DATA = Path(__file__).parents[1] / "data" / "envcache"
OLD, NEW = "2024-01-15T10:00:00.000000Z", "2025-03-01T10:00:00.000000Z"


def _probe_wheel(version: str, out: Path) -> Path:
    source = out / f"src-{version}"
    (source / "sweflow_probe").mkdir(parents=True)
    (source / "sweflow_probe" / "__init__.py").write_text(f"VERSION = {version!r}\n")
    (source / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "sweflow-probe"\nversion = "{version}"\n'
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-index",
            "--no-build-isolation",
            "-w",
            str(out),
            str(source),
        ],
        check=True,
    )
    return next(out.glob(f"sweflow_probe-{version}-*.whl"))


@pytest.fixture(scope="module")
def upstream(tmp_path_factory, wheelhouse: Path) -> Iterator[str]:
    """A loopback PEP 691 index: {project: [(wheel, upload-time)]}."""
    built = tmp_path_factory.mktemp("probe")
    files = {
        "sweflow-probe": [(_probe_wheel("1.0", built), OLD), (_probe_wheel("2.0", built), NEW)],
        **{
            name: [(wheel, OLD) for wheel in wheelhouse.glob(f"{name}-*.whl")]
            for name in ("pip", "setuptools", "wheel")
        },
    }
    by_name = {wheel.name: wheel for entries in files.values() for wheel, _ in entries}

    class Upstream(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            parts = [p for p in self.path.split("/") if p]
            if parts[0] == "files" and parts[1] in by_name:
                body, kind = by_name[parts[1]].read_bytes(), "application/octet-stream"
            elif parts[0] == "simple" and parts[1] in files:
                page = {
                    "meta": {"api-version": "1.1"},
                    "name": parts[1],
                    "files": [
                        {
                            "filename": w.name,
                            "url": f"{base}/files/{w.name}",
                            "upload-time": when,
                            "hashes": {"sha256": hashlib.sha256(w.read_bytes()).hexdigest()},
                        }
                        for w, when in files[parts[1]]
                    ],
                }
                body, kind = json.dumps(page).encode(), "application/vnd.pypi.simple.v1+json"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    base = f"http://127.0.0.1:{server.server_port}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"{base}/simple/"
    server.shutdown()
    server.server_close()


def test_files_uploaded_after_the_cutoff_are_hidden() -> None:
    page = {
        "files": [
            {
                "filename": "a-1.tar.gz",
                "url": "https://x/a-1.tar.gz",
                "upload-time": OLD,
                "hashes": {"sha256": "ab"},
                "requires-python": ">=3.8",
                "yanked": "broken",
            },
            {"filename": "a-2.tar.gz", "url": "https://x/a-2.tar.gz", "upload-time": NEW},
            {"filename": "a-0.tar.gz", "url": "https://x/a-0.tar.gz"},  # no date: kept
        ]
    }
    kept = kept_files(page, date(2024, 6, 27))
    assert [f["filename"] for f in kept] == ["a-1.tar.gz", "a-0.tar.gz"]
    assert [f["filename"] for f in kept_files(page, date(2025, 3, 1))] == [
        "a-1.tar.gz",
        "a-0.tar.gz",
    ]
    text = html_page("a", kept)
    assert '<a href="https://x/a-1.tar.gz#sha256=ab" data-requires-python="&gt;=3.8" ' in text
    assert 'data-yanked="broken">a-1.tar.gz</a>' in text and "a-2" not in text


@pytest.mark.parametrize(("cutoff", "version"), [("2024-06-27", "1.0"), ("2025-06-01", "2.0")])
def test_pip_resolves_as_of_the_cutoff(upstream: str, tmp_path: Path, cutoff, version) -> None:
    index = shared_index(upstream).url(date.fromisoformat(cutoff))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--isolated",
            "--index-url",
            index,
            "-d",
            str(tmp_path),
            "sweflow-probe",
        ],
        check=True,
    )
    assert [p.name.split("-")[1] for p in tmp_path.glob("*.whl")] == [version]


def test_an_environment_build_resolves_as_of_its_spec_cutoff(
    upstream: str, more_itertools_mirror: Path, tmp_path: Path, monkeypatch
) -> None:
    """A networked build of a spec with ``pypi_cutoff``: its sandbox's pip reaches the loopback
    index and installs the release of that date; the cutoff is part of the layer's key."""
    monkeypatch.setenv("SWEFLOW_PYPI_UPSTREAM", upstream)
    for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"):
        monkeypatch.delenv(name, raising=False)
    row = load_instances(DATA / "instances.jsonl").raise_for_errors()[0]
    options = BuildOptions(store=tmp_path / "store", repo_mirror=more_itertools_mirror)
    store = LayerStore(options.store)
    installed = {}
    for cutoff in ("2024-06-27", "2025-06-01"):
        spec = EnvSpec(python="3.11", pip_packages=["sweflow-probe"], pypi_cutoff=cutoff)
        instance = row.model_copy(update={"instance_id": f"probe-{cutoff}"})
        table = SpecTable({row.repo: {row.version or "": spec}})
        [result] = EnvBuilder(table, options).build([instance])
        assert result.status == "built", Path(result.log_path).read_text()[-3000:]
        layers = store.layer_paths(store.read_manifest(instance.instance_id))
        found = {p.name for layer in layers for p in layer.rglob("sweflow_probe-*.dist-info")}
        installed[cutoff] = found
    assert installed == {
        "2024-06-27": {"sweflow_probe-1.0.dist-info"},
        "2025-06-01": {"sweflow_probe-2.0.dist-info"},
    }
