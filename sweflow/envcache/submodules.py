"""A checkout's git submodules, taken from the repository mirror instead of the network.

Some repositories install from a submodule (astropy 1.3 builds with its ``astropy_helpers``):
the harness's clone fetched it from GitHub, and a build sandbox has no network. Each gitlink of
the commit is matched with its URL in the commit's ``.gitmodules``, the URL read as a GitHub
repository (``https://github.com/owner/name``, ``git@github.com:owner/name``, or a path relative
to the superproject's own), and that repository's recorded commit is exported into the
submodule's folder from the same source as the superproject (mirror, local path or URL); one
that cannot be had stays empty, as in the harness's clone.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from sweflow.envcache.repos import RepoError, RepoSource, _git, export_commit

_GITHUB_URL = re.compile(
    r"^(?:(?:https?|git|ssh)://(?:[^@/]+@)?github\.com/|git@github\.com:)"
    r"([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?$"
)


def gitlinks(git_dir: Path, commit: str) -> dict[str, str]:
    """The submodules a commit records: path -> the submodule commit."""
    listing = _git(["ls-tree", "-r", "-z", commit], git_dir=git_dir)
    links = {}
    for entry in filter(None, listing.split("\0")):
        meta, _, path = entry.partition("\t")
        mode, kind, sha = meta.split()
        if kind == "commit" and mode == "160000":
            links[path] = sha
    return links


def submodule_repo(url: str, superproject: str) -> str | None:
    """The ``owner/name`` a submodule URL names (relative URLs resolve against the
    superproject's ``owner/name``), or None for a URL that names no GitHub repository."""
    if url.startswith(("./", "../")):
        joined = posixpath.normpath(posixpath.join(superproject, url))
        return joined.removesuffix(".git") if joined.count("/") == 1 else None
    match = _GITHUB_URL.match(url)
    return f"{match[1]}/{match[2]}" if match else None


def export_submodules(
    source: RepoSource, repo: str, git_dir: Path, commit: str, dest: Path
) -> tuple[list[str], list[str]]:
    """Fill the submodules of ``commit`` (already exported at ``dest``), and theirs: the paths
    filled, and why each other one stays empty. The harness's clone (``git clone
    --single-branch``) leaves every submodule empty, so one the mirror lacks (getmoto/moto's
    terraform-provider-aws, its own test suite's) stays empty here too, named for the build log;
    one an install needs then fails the install, after that line."""
    links = gitlinks(git_dir, commit)
    if not links:
        return [], []
    modules = _modules(git_dir, commit)
    filled: list[str] = []
    empty: list[str] = []
    for path, sha in sorted(links.items()):
        module, url = modules.get(path, (None, None))
        if module is None or url is None:
            empty.append(f"{repo}: submodule {path} at {commit[:12]} has no URL in .gitmodules")
            continue
        name = submodule_repo(url, repo)
        if name is None:
            empty.append(
                f"{repo}: submodule {path} comes from {url}, which names no GitHub repository "
                "that a mirror could hold"
            )
            continue
        try:
            sub_git = source.resolve(name, commits=[sha])
        except RepoError as exc:
            empty.append(f"{repo}: submodule {path} ({url} at {sha[:12]}): {exc}")
            continue
        target = dest / path  # the empty folder the superproject's checkout left
        export_commit(sub_git, sha, target, repo=name)
        # initialised, as `git submodule update --init` leaves it: tools that check (astropy's
        # ah_bootstrap runs `git submodule status`) see it there and fetch nothing
        _git(["config", f"submodule.{module}.url", url], git_dir=dest / ".git")
        _git(["config", f"submodule.{module}.active", "true"], git_dir=dest / ".git")
        filled.append(path)
        inner_filled, inner_empty = export_submodules(source, name, sub_git, sha, target)
        filled += [f"{path}/{inner}" for inner in inner_filled]
        empty += inner_empty
    return filled, empty


def _modules(git_dir: Path, commit: str) -> dict[str, tuple[str, str]]:
    """Submodule path -> (its name, its URL), from the commit's own ``.gitmodules``."""
    try:
        wanted = r"^submodule\..*\.(path|url)$"
        text = _git(
            ["config", "--blob", f"{commit}:.gitmodules", "--get-regexp", wanted], git_dir=git_dir
        )
    except RepoError:
        return {}
    paths: dict[str, str] = {}
    urls: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        name, _, field = key.removeprefix("submodule.").rpartition(".")
        (paths if field == "path" else urls)[name] = value
    return {path: (name, urls[name]) for name, path in paths.items() if name in urls}
