"""Submodules come from the repository mirror: real git repositories whose .gitmodules name
GitHub URLs (absolute and relative, nested), exported and built offline."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_envcache_repos import commit_all, git

from sweflow.envcache.builder import BuildOptions, EnvBuilder, instance_sandbox_spec
from sweflow.envcache.repos import RepoSource, export_commit
from sweflow.envcache.submodules import export_submodules, submodule_repo
from sweflow.harness.specs import EnvSpec, SpecTable
from sweflow.instances import Instance
from sweflow.sandbox import open_sandbox

pytestmark = pytest.mark.timeout(300)


def _repo(
    root: Path, name: str, files: dict[str, str], links: dict[str, tuple[str, str]] | None = None
):
    """A repository ``root/astro__NAME`` with one commit of ``files`` and the submodules
    ``links`` (path -> (url, commit)); its commit."""
    work = root / f"astro__{name}"
    work.mkdir()
    git("init", "-q", "-b", "main", cwd=work)
    for rel, text in files.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    if links:
        modules = "".join(
            f'[submodule "{p}"]\n\tpath = {p}\n\turl = {url}\n' for p, (url, _) in links.items()
        )
        (work / ".gitmodules").write_text(modules)
        for path, (_, sha) in links.items():
            (work / path).mkdir()  # unpopulated, as after a clone: `add -A` keeps the gitlink
            git("update-index", "--add", "--cacheinfo", f"160000,{sha},{path}", cwd=work)
    return commit_all(work, name, 1_600_000_000)


@pytest.fixture(scope="module")
def mirror(tmp_path_factory) -> tuple[Path, str]:
    """astro/core pins astro/helpers at its first commit (an https URL); helpers pins
    astro/tiny by a URL relative to itself."""
    root = tmp_path_factory.mktemp("mirror")
    tiny = _repo(root, "tiny", {"tiny.py": "TINY = 1\n"})
    first = _repo(
        root,
        "helpers",
        {"helpers/__init__.py": "VERSION = 1\n"},
        {"vendored": ("../tiny.git", tiny)},
    )
    (root / "astro__helpers" / "helpers/__init__.py").write_text("VERSION = 2\n")
    commit_all(root / "astro__helpers", "later", 1_600_000_100)  # not the pinned one
    core = _repo(
        root,
        "core",
        {"setup.py": "import helpers\n"},
        {"astropy_helpers": ("https://github.com/astro/helpers.git", first)},
    )
    return root, core


def test_submodules_are_exported_from_the_mirror_at_their_pinned_commits(mirror, tmp_path):
    root, core = mirror
    source = RepoSource(mirror=root)
    git_dir = source.resolve("astro/core")
    dest = tmp_path / "testbed"
    export_commit(git_dir, core, dest)
    filled, empty = export_submodules(source, "astro/core", git_dir, core, dest)
    assert empty == []
    assert filled == ["astropy_helpers", "astropy_helpers/vendored"]
    assert (dest / "astropy_helpers/helpers/__init__.py").read_text() == "VERSION = 1\n"
    assert (dest / "astropy_helpers/vendored/tiny.py").read_text() == "TINY = 1\n"
    assert git("status", "--porcelain", cwd=dest) == ""
    status = git("submodule", "status", "--recursive", cwd=dest)
    # initialised (not "-") at the recorded commit (not "+"), the nested one too
    assert len(status.splitlines()) == 2 and not any(
        line.startswith(("-", "+", "U")) for line in status.splitlines()
    ), status


def test_a_submodule_the_mirror_lacks_stays_empty_and_is_named(mirror, tmp_path):
    """As the harness's clone leaves every submodule (getmoto/moto's terraform-provider-aws)."""
    root, core = mirror
    lacking = tmp_path / "lacking"
    lacking.mkdir()
    (lacking / "astro__core").symlink_to(root / "astro__core")
    source = RepoSource(mirror=lacking)
    git_dir = source.resolve("astro/core")
    export_commit(git_dir, core, tmp_path / "testbed")
    filled, empty = export_submodules(source, "astro/core", git_dir, core, tmp_path / "testbed")
    assert filled == [] and len(empty) == 1
    assert "submodule astropy_helpers" in empty[0] and "github.com/astro/helpers" in empty[0]
    assert "astro/helpers is not in the repo mirror" in empty[0]
    assert not any((tmp_path / "testbed" / "astropy_helpers").iterdir())


@pytest.mark.parametrize(
    ("url", "repo"),
    [
        ("https://github.com/astropy/astropy-helpers.git", "astropy/astropy-helpers"),
        ("git://github.com/astropy/astropy-helpers", "astropy/astropy-helpers"),
        ("git@github.com:astropy/astropy-helpers.git", "astropy/astropy-helpers"),
        ("../astropy-helpers.git", "astropy/astropy-helpers"),
        ("./inner", None),  # would be astropy/astropy/inner: not owner/name
        ("https://gitlab.com/a/b.git", None),
    ],
)
def test_submodule_urls_name_github_repositories(url, repo):
    assert submodule_repo(url, "astropy/astropy") == repo


def test_an_instance_builds_with_its_submodules_offline(
    mirror, tmp_path, wheelhouse, bookworm_rootfs
):
    root, core = mirror
    spec = EnvSpec(python="3.11", test_cmd="pytest")
    options = BuildOptions(store=tmp_path / "store", repo_mirror=root, wheelhouse=wheelhouse)
    builder = EnvBuilder(SpecTable({"astro/core": {"1.0": spec}}), options)
    row = Instance(
        instance_id="astro__core-1",
        repo="astro/core",
        base_commit=core,
        version="1.0",
        patch="",
        test_patch="",
        problem_statement="",
    )
    [built] = builder.build([row])
    assert built.status == "built", built.error
    with open_sandbox(instance_sandbox_spec(builder.store, row.instance_id)) as sandbox:
        found = sandbox.exec("cat astropy_helpers/helpers/__init__.py && git status --porcelain")
    assert found.ok and found.output == "VERSION = 1\n", found.output
