"""Repository sources for a task's ``repo`` ("owner/name"), and export of one commit as /testbed.

A repository comes from a local path, a mirror folder (``DIR/owner__name`` or ``DIR/owner/name``,
optionally with a ``.git`` suffix, bare or not, symlinks followed, a git bundle
``DIR/owner__name.bundle`` as datasets ship them, or ``DIR/owner__name.git.tar``, a tar of a bare
shallow repository: only a dataset's commits, which a bundle cannot carry without their
history) or a git URL cloned once into ``cache_root()/repos/owner__name.git`` as a bare mirror
and fetched again only when a needed commit is missing. A bundle or tar is unpacked once per
content digest, so an updated one is seen.

``export_commit`` writes a self-contained, one-commit (shallow) repository: its objects are only
the commit and its tree, copied from the source's object database by ``rev-list |
pack-objects | unpack-objects`` (loose, so instances share the objects of the files they
share). There is no remote, no alternates file and no FETCH_HEAD, so nothing
points back at the host (the result is captured into a read-only layer and used in a sandbox
where host paths do not exist), and ``git log --all`` in the sandbox cannot show the future fix.

Git never runs a hook or reads the user's or the system's config for local work here (hooks go
to /dev/null; ``core.autocrlf`` or an LFS filter in ``~/.gitconfig`` would change the checked-out
bytes). Cloning and fetching a URL keep the user's config, for credentials and proxies.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sweflow.errors import SweflowError
from sweflow.paths import cache_root

if TYPE_CHECKING:
    from sweflow.instances import Instance

BRANCH = "main"  # the branch /testbed is on, as a harness clone would be on one
_REPO_RE = re.compile(r"([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)")
# A commit id, or the parent of one: R2E-Gym's rows name the commit before a fix `<sha>^`.
_COMMIT_RE = re.compile(r"[0-9a-fA-F]{4,64}\^?")
_URL_USERINFO = re.compile(r"(\w+://)[^/@\s]+@")
# Variables that point git at another repository, index or object store.
_LOCATION_VARS = frozenset(
    {
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_COMMON_DIR",
        "GIT_NAMESPACE",
        "GIT_CONFIG",
        "GIT_CONFIG_PARAMETERS",
        "GIT_CONFIG_COUNT",
    }
)
# Written into the exported repository's config. The layer capture and the sandbox's overlayfs
# give every file a new inode, device and ctime: comparing only mtime and size keeps the index
# valid there, so the first `git status` in a sandbox does not re-hash the whole tree.
# gc.auto off: the objects are loose (see _copy_objects), and a `git commit` in a large
# repository's sandbox would otherwise pack them all first
_EXPORT_CONFIG = "[core]\n\tcheckStat = minimal\n\ttrustctime = false\n[gc]\n\tauto = 0\n"
# The mtime of every exported file (2000-01-01 UTC): the same for every commit, so that what two
# commits share is byte- and stat-identical; long after 1980, the earliest a zip can hold.
EXPORT_MTIME = 946684800
# Who and when sweflow's own commits are (a setup patch, a sample repository's notes): fixed, so
# that the same change gives the same commit, and the layer holding it the same bytes.
FIXED_AUTHOR = ("-c", "user.name=sweflow", "-c", "user.email=setup@sweflow")
FIXED_DATE = {
    "GIT_AUTHOR_DATE": f"@{EXPORT_MTIME} +0000",
    "GIT_COMMITTER_DATE": f"@{EXPORT_MTIME} +0000",
}
SCM_VERSION_NOTES = "sweflow-scm-version"  # git notes: a commit's version, for shallow copies


class RepoError(SweflowError):
    """A repository that cannot be found, cloned or exported (per instance)."""


@dataclass(frozen=True)
class RepoSource:
    """Where repositories come from; the first of ``local``, ``mirror``, ``url`` that is set wins.

    ``local`` is one repository (for a single-repo dataset). ``url`` may hold the placeholders
    ``{repo}``, ``{owner}`` and ``{name}`` (``https://github.com/{repo}.git``) so that one source
    serves a dataset of many repos; a mirror miss falls back to it. ``cache`` is where URL clones
    live (default ``cache_root()/"repos"``).
    """

    mirror: Path | None = None
    local: Path | None = None
    url: str | None = None
    cache: Path | None = None

    def resolve(self, repo: str, *, commits: Iterable[str] = ()) -> Path:
        """The git dir holding ``repo``; a URL clone is fetched if one of ``commits`` is missing."""
        owner, name = _split_repo(repo)
        found = self.locate(repo)
        if isinstance(found, Path) and not found.is_file():
            return found
        if isinstance(found, Path):  # a bundle or a tar: unpacked once per content digest
            digest = hashlib.sha256(found.read_bytes()).hexdigest()[:16]
            dest = self._cache() / f"{owner}__{name}.{digest}.git"
            if found.name.endswith(".git.tar"):
                return _cached_untar(found, dest)
            return _cached_clone(repo, str(found.resolve()), dest, commits)
        return _cached_clone(repo, found, self._cache() / f"{owner}__{name}.git", commits)

    def locate(self, repo: str) -> Path | str:
        """Where ``repo`` comes from, without cloning anything: a git dir, a bundle or a URL.

        Cheap enough to check every repository of a dataset before building any of them.
        """
        owner, name = _split_repo(repo)
        if self.local is not None:
            git_dir = _git_dir(Path(self.local))
            if git_dir is None:
                raise RepoError(f"{repo}: the local path {self.local} is not a git repository")
            return git_dir
        tried: list[Path] = []
        if self.mirror is not None:
            mirror = Path(self.mirror)
            for rel in (f"{owner}__{name}", f"{owner}/{name}"):
                for candidate in (mirror / rel, mirror / f"{rel}.git"):
                    tried.append(candidate)
                    if (git_dir := _git_dir(candidate)) is not None:
                        return git_dir
                for packed in (mirror / f"{rel}.bundle", mirror / f"{rel}.git.tar"):
                    tried.append(packed)
                    if packed.is_file():
                        return packed
        if self.url is not None:
            return (
                self.url.replace("{repo}", repo).replace("{owner}", owner).replace("{name}", name)
            )
        if self.mirror is not None:
            raise RepoError(
                f"{repo} is not in the repo mirror {self.mirror}: tried "
                + ", ".join(str(p) for p in tried)
                + " (layouts <owner>__<name> and <owner>/<name>, bare or not, a .bundle or"
                " a .git.tar)"
            )
        raise RepoError(f"no source for repository {repo}: give a repo mirror, a path or a URL")

    def _cache(self) -> Path:
        return Path(self.cache) if self.cache is not None else cache_root() / "repos"


def resolve_repo(
    repo: str,
    *,
    mirror: Path | None = None,
    local: Path | None = None,
    url: str | None = None,
    commits: Iterable[str] = (),
) -> Path:
    """``RepoSource(mirror, local, url).resolve(repo, commits=commits)``."""
    return RepoSource(mirror=mirror, local=local, url=url).resolve(repo, commits=commits)


def unbuildable_rows(source: RepoSource, rows: Sequence[Instance]) -> dict[str, str]:
    """The rows that cannot be built for want of their repository or commit, each with why: a
    repository name not of the form "owner/name" or found nowhere (where it was looked for), a
    ``base_commit`` that is no commit id, or one a local repository lacks (nothing would fetch
    it). A RepoError naming them when no row can be. It reads, never clones or writes: a build
    runs it before any layer, and a command before its work starts (``sweflow --dry-run`` too).
    """
    found: dict[str, Path | str | RepoError] = {}
    for repo in sorted({row.repo for row in rows}):
        try:
            found[repo] = source.locate(repo)
        except RepoError as exc:
            found[repo] = exc
    absent: dict[str, set[str]] = {
        repo: missing_commits(where, (r.base_commit for r in rows if r.repo == repo))
        for repo, where in found.items()
        if isinstance(where, Path) and not where.is_file()  # a git dir; a bundle holds more
    }
    problems = {}
    for row in rows:
        where = found[row.repo]
        if isinstance(where, RepoError):
            problems[row.instance_id] = str(where)
        elif not _COMMIT_RE.fullmatch(row.base_commit):
            problems[row.instance_id] = f"{row.repo}: {row.base_commit!r} is not a commit id"
        elif row.base_commit in absent.get(row.repo, ()):
            problems[row.instance_id] = f"{row.repo}: commit {row.base_commit} is not in {where}"
    if rows and len(problems) == len(rows):
        unfound = [str(e) for e in found.values() if isinstance(e, RepoError)]
        if len(unfound) == len(found):
            raise RepoError(f"{len(found)} repositories have no source: " + "; ".join(unfound))
        reasons = "; ".join(sorted(set(problems.values())))
        raise RepoError(f"none of {len(rows)} instance(s) can be built: {reasons}")
    return problems


def missing_commits(git_dir: Path, commits: Iterable[str]) -> set[str]:
    """Which of ``commits`` (ids, whole or abbreviated) name no commit in ``git_dir``: one git
    process for all of them."""
    wanted = sorted({c for c in commits if _COMMIT_RE.fullmatch(c)})
    done = subprocess.run(
        ["git", "--git-dir", str(git_dir), "cat-file", "--batch-check"],
        input="".join(f"{commit}^{{commit}}\n" for commit in wanted),
        capture_output=True,
        text=True,
        env=_git_env(network=False),
    )
    if done.returncode != 0:  # git cannot read it: the build says why
        return set()
    answers = done.stdout.splitlines()
    return {
        c for c, answer in zip(wanted, answers, strict=False) if answer.split()[1:2] != ["commit"]
    }


def has_commit(git_dir: Path, commit: str) -> bool:
    """Whether ``commit`` names a commit object in ``git_dir``."""
    if not _COMMIT_RE.fullmatch(commit):
        return False
    return _git_run(["cat-file", "-e", f"{commit}^{{commit}}"], git_dir=git_dir).returncode == 0


_DESCRIBED = re.compile(r".*?(\d+(?:\.\d+)*)(\S*)-(\d+)-g([0-9a-f]+)")


def scm_version(git_dir: Path, commit: str) -> str | None:
    """The version setuptools_scm computes for ``commit`` in a full clone (its default
    guess-next-dev scheme), or None without a version tag before it.

    An exported repository holds one commit and no tags, so setuptools_scm would say 0.1.dev1
    there (and pytest's own tox.ini then refuses to run); the build hands it this instead. A
    shallow repository (a committed sample's) has no tags either: the version computed where
    the history was whole is its note in ``SCM_VERSION_NOTES``.
    """
    described = _git_run(["describe", "--tags", "--long", commit], git_dir=git_dir)
    match = _DESCRIBED.fullmatch(described.stdout.strip()) if described.returncode == 0 else None
    if match is None:
        noted = _git_run(["notes", "--ref", SCM_VERSION_NOTES, "show", commit], git_dir=git_dir)
        return (noted.stdout.strip() or None) if noted.returncode == 0 else None
    version, suffix, distance, sha = match.groups()
    if distance == "0":
        return version + suffix
    if "dev" in suffix:  # a dev tag: the distance replaces its dev number
        suffix = ""
    elif not suffix:
        *head, last = version.split(".")
        version = ".".join([*head, str(int(last) + 1)])
    return f"{version}{suffix}.dev{distance}+g{sha}"


def export_commit(git_dir: Path, commit: str, dest: Path, *, repo: str | None = None) -> None:
    """Make ``dest`` a working repository with ``commit`` checked out on branch ``main``.

    ``dest`` must be absent or empty. The result has HEAD = ``commit``, a clean status, a
    shallow history of that one commit and no link to ``git_dir``. Files are written with umask
    022 and every mtime set to ``EXPORT_MTIME``, so exporting the same commit twice gives
    identical trees (contents, modes and mtimes), and a file two commits share is the same file
    in both (the store's file pool keeps it once, and the index of each still matches it by
    stat), its git object too; only the ``.git`` internals (index stat data, the commit and the
    trees that changed) differ.
    Submodules are left as empty directories, as a clone without ``--recurse-submodules``
    leaves them. ``repo`` names the repository in errors.
    """
    label = repo or str(git_dir)
    shown = None
    if _COMMIT_RE.fullmatch(commit):  # hex (and ^) only, so never read as an option
        shown = _git_run(["show", "-s", "--format=%H", f"{commit}^{{commit}}"], git_dir=git_dir)
    if shown is None or shown.returncode != 0:
        raise RepoError(f"{label}: commit {commit} is not in {git_dir} (or is not a commit)")
    full = shown.stdout.strip()
    dest = Path(dest)
    created = not dest.exists()
    if not created and any(dest.iterdir()):
        raise RepoError(f"{label}: cannot export {commit} into {dest}: it is not empty")
    dest.mkdir(parents=True, exist_ok=True)
    try:
        _export(git_dir, full, dest)
    except BaseException:  # leave dest as it was found
        if created:
            shutil.rmtree(dest, ignore_errors=True)
        else:
            for child in dest.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink()
        raise


def commit_patch(dest: Path, patch: str, message: str, *, label: str) -> None:
    """Apply ``patch`` to the exported repository ``dest`` and commit it on its branch, with a
    fixed author and date so that the same patch gives the same commit (and layer) every time.
    RepoError naming ``label`` (the instance) when it does not apply."""
    with tempfile.NamedTemporaryFile("w", suffix=".diff") as diff:
        diff.write(patch if patch.endswith("\n") else patch + "\n")
        diff.flush()
        applied = _git_run(["apply", "--whitespace=nowarn", diff.name], cwd=dest)
    if applied.returncode != 0:
        raise RepoError(f"{label}: its setup patch does not apply: {applied.stderr.strip()}")
    _git(["add", "-A"], cwd=dest)
    _git(
        [
            *FIXED_AUTHOR,
            *("-c", "core.logAllRefUpdates=false", "commit", "-q", "--no-verify", "-m", message),
        ],
        cwd=dest,
        extra_env=FIXED_DATE,
    )
    _set_mtimes(dest, EXPORT_MTIME)
    _git(["update-index", "-q", "--refresh"], cwd=dest)


def _export(git_dir: Path, commit: str, dest: Path) -> None:
    _git(["init", "-q", "--template=", f"--initial-branch={BRANCH}", str(dest)])
    new_git = dest / ".git"
    with open(new_git / "config", "a") as config:  # a second [core] section is valid config
        config.write(_EXPORT_CONFIG)
    _copy_objects(git_dir, commit, new_git)
    _set_mtimes(new_git / "objects", EXPORT_MTIME)  # the pool keys a work tree's files by mtime
    (new_git / "shallow").write_text(commit + "\n")
    # No reflog: it would record this host's user and hostname in the layer.
    _git(
        ["-c", "core.logAllRefUpdates=false", "update-ref", f"refs/heads/{BRANCH}", commit],
        git_dir=new_git,
    )
    _git(["read-tree", "-u", "--reset", "HEAD"], cwd=dest)
    _set_mtimes(dest, EXPORT_MTIME)
    # The mtimes just changed: record the new stat data, so that the index is clean and, being
    # newer than every file, no entry is "racily clean" (re-hashed by every status).
    _git(["update-index", "-q", "--refresh"], cwd=dest)


def _copy_objects(git_dir: Path, commit: str, new_git: Path) -> None:
    """Copy ``commit`` and every tree and blob under it (no parents) into ``new_git``'s store,
    as loose objects: one file per object, the same bytes in every instance whose commit has
    that object, so the store's pool keeps a repository's unchanged files' objects once (a pack
    holds one commit's objects together: no two instances shared one, 0.97 of the 2.3 GB that
    198 SWE-bench Verified instances owned).

    ``pack-objects --stdout | unpack-objects``: a zero delta window skips the delta search (most
    of the cost).
    """
    objects = _git(["rev-list", "--objects", "--no-walk", commit], git_dir=git_dir)
    env = _git_env(network=False)
    pipe = subprocess.PIPE
    with tempfile.TemporaryFile() as errors:
        packer = subprocess.Popen(
            ["git", "--git-dir", str(git_dir), "pack-objects", "-q", "--window=0", "--stdout"],
            stdin=pipe,
            stdout=pipe,
            stderr=errors,
            env=env,
        )
        unpacker = subprocess.Popen(
            ["git", "--git-dir", str(new_git), "unpack-objects", "-q"],
            stdin=packer.stdout,
            stdout=subprocess.DEVNULL,
            stderr=errors,
            env=env,
            umask=0o022,
        )
        assert packer.stdin is not None and packer.stdout is not None
        packer.stdout.close()  # the unpacker holds the read end now
        try:
            packer.stdin.write(objects.encode() + b"\n")
            packer.stdin.close()
        except BrokenPipeError:
            pass  # the packer died: its message is in errors
        if packer.wait() != 0 or unpacker.wait() != 0:
            errors.seek(0)
            tail = "\n".join(errors.read().decode(errors="replace").strip().splitlines()[-10:])
            raise RepoError(f"{git_dir}: copying the objects of {commit} failed: {tail}")


def _set_mtimes(root: Path, when: int) -> None:
    """Set the mtime (and atime) of everything under ``root`` but a ``.git`` at its top to
    ``when``.

    Touching a file leaves its directory's mtime alone, so the order does not matter.
    """
    for parent, dirs, files in os.walk(root):
        if parent == str(root) and ".git" in dirs:
            dirs.remove(".git")
        for entry in (*dirs, *files):
            os.utime(os.path.join(parent, entry), (when, when), follow_symlinks=False)
    os.utime(root, (when, when))


@contextmanager
def _locked(dest: Path) -> Iterator[None]:
    """Holds the lock file beside ``dest``: one process makes or updates it at a time."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.with_name(dest.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _make_atomically(dest: Path, make: Callable[[Path], None]) -> None:
    """``make(tmp)`` then rename to ``dest``: an interrupted one never looks finished."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        make(tmp)
        tmp.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _cached_untar(archive: Path, dest: Path) -> Path:
    """The bare repository in ``archive`` (a tar of its files), unpacked once at ``dest``.

    The form for a shallow repository (a dataset's commits without their history), which a git
    bundle cannot carry: a bundle needs the commits' parents.
    """

    def unpack(tmp: Path) -> None:
        try:
            with tarfile.open(archive) as tar:
                tar.extractall(tmp, filter="data")
        except (tarfile.TarError, OSError) as exc:
            raise RepoError(f"{archive}: cannot unpack the repository: {exc}") from None
        if _git_dir(tmp) is None:
            raise RepoError(f"{archive} does not hold a bare git repository")

    with _locked(dest):
        if not dest.exists():
            _make_atomically(dest, unpack)
    return dest


def _cached_clone(repo: str, url: str, dest: Path, commits: Iterable[str]) -> Path:
    """A bare mirror clone of ``url`` at ``dest``, made once and fetched only when needed."""

    def clone(tmp: Path) -> None:
        _git(["clone", "-q", "--mirror", "--template=", url, str(tmp)], repo=repo)

    with _locked(dest):
        if not dest.exists():
            _make_atomically(dest, clone)
        missing = [c for c in commits if _COMMIT_RE.fullmatch(c) and not has_commit(dest, c)]
        if missing:
            _git(["fetch", "-q", "--force", url, "refs/*:refs/*"], git_dir=dest, repo=repo)
        for commit in missing:
            if not has_commit(dest, commit):  # reachable from no ref, e.g. a deleted branch's
                ref = f"{commit}:refs/sweflow/{commit}"
                _git_run(["fetch", "-q", url, ref], git_dir=dest, network=True)
    return dest


def _split_repo(repo: str) -> tuple[str, str]:
    match = _REPO_RE.fullmatch(repo)
    if match is None or {match[1], match[2]} & {".", ".."}:
        raise RepoError(f'repository name {repo!r} is not of the form "owner/name"')
    return match[1], match[2]


def _git_dir(path: Path) -> Path | None:
    """The git dir of a repository at ``path`` (``path/.git`` or ``path`` itself if bare).

    Git is pointed at the directory explicitly, never left to search upwards: a mirror folder
    inside some other checkout must not resolve to that checkout.
    """
    candidate = path / ".git" if (path / ".git").exists() else path
    if not (candidate / "HEAD").exists() and not candidate.is_file():
        return None
    found = _git_run(["rev-parse", "--absolute-git-dir"], git_dir=candidate)
    return Path(found.stdout.strip()).resolve() if found.returncode == 0 else None


def _git_env(network: bool) -> dict[str, str]:
    """The environment for git: no hooks, and no config but the repository's for local work.

    Variables such as GIT_DIR or GIT_INDEX_FILE (set when sweflow runs from a git hook) would
    redirect every command, so they are dropped; a network call keeps the rest (GIT_SSH_COMMAND,
    GIT_ASKPASS) and the user's config files.
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GIT_") or (network and k not in _LOCATION_VARS)
    }
    if not network:
        env |= {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    env |= {"GIT_TERMINAL_PROMPT": "0"}
    env |= {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.hooksPath"}
    env |= {"GIT_CONFIG_VALUE_0": os.devnull}
    return env


def _git_run(
    args: list[str],
    *,
    git_dir: Path | None = None,
    cwd: Path | None = None,
    network: bool = False,
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``git [--git-dir GIT_DIR] ARGS`` with umask 022, so file modes do not vary."""
    argv = ["git", *(["--git-dir", str(git_dir)] if git_dir is not None else []), *args]
    return subprocess.run(
        argv,
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**_git_env(network), **(extra_env or {})},
        umask=0o022,
    )


def _git(
    args: list[str],
    *,
    git_dir: Path | None = None,
    cwd: Path | None = None,
    repo: str | None = None,
    extra_env: dict[str, str] | None = None,
) -> str:
    """Run git and return its stdout, stripped; a failure is a RepoError with git's message.

    ``repo`` marks a network call (clone or fetch of a URL) and names the repository in errors.
    """
    done = _git_run(args, git_dir=git_dir, cwd=cwd, network=repo is not None, extra_env=extra_env)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-10:])
        message = f"{repo or git_dir or cwd}: `git {' '.join(args)}` failed: {tail}"
        raise RepoError(_URL_USERINFO.sub(r"\1***@", message))  # no token from a URL in logs
    return done.stdout.strip()
