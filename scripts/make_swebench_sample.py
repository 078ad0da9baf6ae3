"""Write a small sample of a dataset (any format sweflow reads: SWE-bench, SWE-smith...) that
builds offline from the checkout: rows and their commits.

    python scripts/make_swebench_sample.py lite.json MIRROR_DIR OUT_DIR ID [ID ...]

OUT_DIR gets ``tasks.jsonl`` (the rows, as the dataset has them) and, per repository,
``repos/<owner>__<name>.git.tar``: a bare shallow repository holding only the rows'
``base_commit`` and ``environment_setup_commit`` (a ref each, ``refs/sweflow/<commit>``), fetched
at depth 1 from the mirror, with the version setuptools_scm computes for each where the history
is whole as a git note (tags do not travel at depth 1). A git bundle cannot carry commits
without their parents; sweflow's repo mirror reads the tar (sweflow.envcache.repos). The tar is
written with fixed owners and mtimes, members sorted.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import tarfile
import tempfile
from collections import defaultdict
from pathlib import Path

from sweflow.envcache.repos import FIXED_AUTHOR, FIXED_DATE, SCM_VERSION_NOTES, scm_version
from sweflow.formats import row_mapper


def load_rows(path: Path) -> list[dict]:
    text = path.read_text()
    if text.lstrip().startswith("["):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def shallow_repo(mirror: Path, commits: list[str], dest: Path) -> None:
    """``dest``: a bare repository of ``commits`` fetched at depth 1 from ``mirror``; a commit
    named as the parent of one (``<sha>^``, R2E-Gym's rows) is ``<sha>`` at depth 2."""
    subprocess.run(["git", "init", "-q", "--bare", "--template=", str(dest)], check=True)
    for depth in (1, 2):
        wanted = [c.rstrip("^") for c in commits if c.endswith("^") == (depth == 2)]
        if not wanted:
            continue
        fetch = ["git", "-C", str(dest), "-c", "protocol.file.allow=always", "fetch", "-q"]
        fetch += ["--depth", str(depth), f"file://{mirror.resolve()}", *wanted]
        subprocess.run(fetch, check=True)
    for commit in (c.rstrip("^") for c in commits):
        ref = f"refs/sweflow/{commit}"
        subprocess.run(["git", "-C", str(dest), "update-ref", ref, commit], check=True)
        if version := scm_version(mirror, commit):  # tags do not travel at depth 1
            note = ["notes", "--ref", SCM_VERSION_NOTES, "add", "-m", version, commit]
            git = ["git", "-C", str(dest), *FIXED_AUTHOR, *note]
            subprocess.run(git, check=True, env={**os.environ, **FIXED_DATE})
    subprocess.run(["git", "-C", str(dest), "gc", "-q", "--prune=now"], check=True)
    (dest / "FETCH_HEAD").unlink(missing_ok=True)


def submodule_commits(mirror_dir: Path, name: str, commit: str) -> dict[str, str]:
    """The submodules of ``commit`` whose repository the mirror folder holds, as
    ``{owner__name: the commit the superproject records}``."""
    git = ["git", "--git-dir", str(mirror_dir / name)]
    shown = subprocess.run([*git, "show", f"{commit}:.gitmodules"], capture_output=True, text=True)
    if shown.returncode != 0:
        return {}
    found = {}
    for path, url in re.findall(r"path\s*=\s*(\S+)\s+url\s*=\s*(\S+)", shown.stdout):
        owner_name = "__".join(url.removesuffix(".git").rstrip("/").split("/")[-2:])
        entry = subprocess.run([*git, "ls-tree", commit, path], capture_output=True, text=True)
        fields = entry.stdout.split()
        if (mirror_dir / owner_name).exists() and len(fields) >= 3 and fields[1] == "commit":
            found[owner_name] = fields[2]
    return found


def write_tar(root: Path, out: Path) -> None:
    with tarfile.open(out, "w", format=tarfile.GNU_FORMAT) as tar:
        for path in sorted(root.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(root)))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            if path.is_file():
                tar.addfile(info, io.BytesIO(path.read_bytes()))
            else:
                tar.addfile(info)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dataset", type=Path)
    ap.add_argument("mirror", type=Path, help="folder of <owner>__<name> git repositories")
    ap.add_argument("out", type=Path)
    ap.add_argument("ids", nargs="+")
    args = ap.parse_args()
    mapper = row_mapper()  # the row's format says where its repository and commits are
    tasks = {
        (task := mapper(dict(row)))["instance_id"]: (row, task) for row in load_rows(args.dataset)
    }
    chosen = [tasks[i] for i in args.ids]
    by_repo: dict[str, list[str]] = defaultdict(list)
    for _, task in chosen:
        name = task["repo"].replace("/", "__")
        for commit in (task["base_commit"], task.get("environment_setup_commit")):
            if commit and commit not in by_repo[name]:
                by_repo[name].append(commit)
    for name, commits in list(by_repo.items()):  # and the submodules the mirror folder has
        for commit in commits:
            for sub, sub_commit in submodule_commits(args.mirror, name, commit).items():
                if sub_commit not in by_repo[sub]:
                    by_repo[sub].append(sub_commit)
    (args.out / "repos").mkdir(parents=True, exist_ok=True)
    for name, commits in by_repo.items():
        repo = name.replace("__", "/")
        with tempfile.TemporaryDirectory() as tmp:
            shallow_repo(args.mirror / name, commits, Path(tmp) / "repo.git")
            write_tar(Path(tmp) / "repo.git", args.out / "repos" / f"{name}.git.tar")
        size = (args.out / "repos" / f"{name}.git.tar").stat().st_size
        print(f"{repo}: {len(commits)} commits, {size / 1e6:.1f} MB")
    with open(args.out / "tasks.jsonl", "w") as f:
        f.writelines(json.dumps(row) + "\n" for row, _ in chosen)
    print(f"wrote {args.out / 'tasks.jsonl'}: {len(chosen)} rows")


if __name__ == "__main__":
    main()
