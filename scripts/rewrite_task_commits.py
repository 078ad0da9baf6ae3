"""Give a synthesized task set's bug commits the message ``sweflow synth`` writes now (issue 54).

    python scripts/rewrite_task_commits.py data/demo data/learn

The message used to be ``Synthesized bug: OPERATOR in FILE:LINE``, and /testbed's ``git log``
printed it. Each task's ``base_commit`` is made again by ``commit_task_tree`` from the same tree
and the same parent (the commit a synthesis makes now: the message is the only input that
changed), its ref in the bundle moved to it and the bundle written anew, so the old commits and
their messages are gone from it; in the task's row every occurrence of the old id (its
``base_commit``, the eval script's ``git diff``) becomes the new one. Instance ids derive from
the fix's diff, not from a commit: they, the split and the report stay. A full re-synthesis
would do the same, but it takes hours and its failure messages are not all reproducible (a
flaky message differs). Running it again changes nothing.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from sweflow.instances import Instance, load_instances, write_jsonl
from sweflow.synth.sources import git
from sweflow.synth.tasks import TASK_MESSAGE, commit_task_tree


def rewrite_repo(bundle: Path, rows: list[Instance], work: Path) -> dict[str, str]:
    """Re-make the rows' commits in a clone of ``bundle`` and write the bundle again from it;
    returns old commit -> new commit."""
    clone = work / bundle.stem
    subprocess.run(["git", "clone", "-q", "--mirror", str(bundle), str(clone)], check=True)
    moved: dict[str, str] = {}
    for row in rows:
        old = row.base_commit
        message = git(clone, "log", "-1", "--format=%B", old).strip()
        if message == TASK_MESSAGE:
            continue
        tree = git(clone, "rev-parse", f"{old}^{{tree}}").strip()
        parent = git(clone, "rev-parse", f"{old}^").strip()
        if parent != row.environment_setup_commit:
            raise SystemExit(f"{row.instance_id}: {old}'s parent is not its clean commit")
        # the old message gives the old commit back: identity and date are synth's
        if git(clone, "commit-tree", tree, "-p", parent, "-m", message).strip() != old:
            raise SystemExit(f"{row.instance_id}: {old} was not made as synth makes commits")
        moved[old] = commit_task_tree(clone, tree, parent)
        git(clone, "update-ref", f"refs/tasks/{row.instance_id}", moved[old], old)
    if moved:
        refs = ["refs/heads/main", *(f"refs/tasks/{row.instance_id}" for row in rows)]
        tmp = bundle.with_suffix(".bundle.tmp")
        git(clone, "-c", "pack.threads=1", "bundle", "create", "-q", str(tmp), *refs)
        tmp.rename(bundle)
    return moved


def rewrite_dataset(folder: Path) -> int:
    """Rewrite every task of ``folder`` (tasks.jsonl and repos/*.bundle); returns how many."""
    folder = folder.resolve()
    tasks = folder / "tasks.jsonl"
    rows = load_instances(tasks).raise_for_errors()
    by_repo: dict[str, list[Instance]] = defaultdict(list)
    for row in rows:
        by_repo[row.repo].append(row)
    moved: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as work:
        for repo, repo_rows in sorted(by_repo.items()):
            bundle = folder / "repos" / f"{repo.replace('/', '__')}.bundle"
            moved |= rewrite_repo(bundle, repo_rows, Path(work))
    rewritten = []
    for row in rows:
        old = row.base_commit
        if old in moved:
            script = (row.eval_script or "").replace(old, moved[old])
            row = row.model_copy(update={"base_commit": moved[old], "eval_script": script})
            if old in row.model_dump_json():
                raise SystemExit(f"{row.instance_id}: {old} is named in a field not rewritten")
        rewritten.append(row)
    write_jsonl(rewritten, tasks)
    return len(moved)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="task set folders (data/demo)")
    for folder in parser.parse_args(argv).folders:
        print(f"{folder}: {rewrite_dataset(folder)} task commits rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
