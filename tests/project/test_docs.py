"""The README and the docs site say what the code does, and what they show runs.

The site (docs/, mkdocs.yml) builds with ``mkdocs build --strict``: every page link and anchor
resolves. Every repository path and ``sweflow.`` name that a page quotes in code exists. Every
``sweflow ...`` line of a ```bash block runs as written up to where its work starts (under
``sweflow --dry-run``, from a scratch directory: tests/cli_dryrun.py), and every other command
line shown is in :data:`NOT_RUN_HERE` with the reason it is not run here (or the test that runs
it). Python blocks parse and their imports resolve; the quickstart's sandbox block runs in a
real sandbox. Pages quote no commit of this repository: dated figures and their commits belong in
benchmarks/results/. The README stays an entry point: at most 250 lines.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from cli_dryrun import REPO, check_dry_run
from conftest import cli_commands

README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
RESULTS = sorted((REPO / "benchmarks" / "results").rglob("*.md"))
PAGES = [README, *DOCS]  # what people read first: commands and Python here are run or checked
ALL_PAGES = [*PAGES, *RESULTS]  # quoted paths and names are checked everywhere
README_MAX_LINES = 250

# Command lines shown in ```bash blocks that are not `sweflow ...`: each with why it is not run
# here, or the test that runs it.
NOT_RUN_HERE = {
    "bash scripts/demo.sh": "the main job: about 25 minutes and a vLLM server "
    "(benchmarks/results/pipeline.md); tests/pipeline/test_pipeline_prefect.py runs the pipeline",
    "bash scripts/test.sh": "the test suite itself (what .ci/run calls)",
    ".venv/bin/python scripts/build_swesmith_image.py --out images/": "builds a 2.2 GB image "
    "with a docker daemon, apt and PyPI; run as written for benchmarks/results/datasets.md",
    "bash scripts/setup.sh": "installs system packages and .venv; every test run starts with it "
    "(scripts/test.sh)",
    "source .venv/bin/activate": "a shell's own set-up",
    "bash scripts/setup-mlflow.sh": "installs .venv-mlflow; every test run starts with it "
    "(scripts/test.sh)",
    ".venv-mlflow/bin/mlflow server --host 127.0.0.1 --port 5000 --backend-store-uri "
    "sqlite:///runs/mlflow.db": "starts a long-running server; tests/tracking_servers.py starts "
    "one for the tracking tests",
    "wandb sync --id RUN_ID runs/sft/wandb/offline-run-*-RUN_ID": "uploads to W&B's servers; "
    "tests/tracking/test_tracking.py reads the offline folders it would upload",
    "export E2B_API_URL=http://127.0.0.1:49982 E2B_SANDBOX_URL=http://127.0.0.1:49982 "
    'E2B_API_KEY="$(cat e2b.key)"': "environment for the line after it",
    "python -c \"from e2b import Sandbox; s = Sandbox.create('INSTANCE_ID'); "
    "print(s.commands.run('ls /testbed').stdout)\"": "needs a built instance and a running "
    "endpoint; tests/e2b_endpoint/test_e2b_endpoint.py makes the same SDK calls against one",
    "cat runs/gold/sft.jsonl runs/corrections/corrections.jsonl > runs/round2.jsonl": "plain "
    "shell joining the outputs of the lines around it",
    "export PREFECT_API_URL=http://127.0.0.1:4200/api": "environment for the lines after it",
    "prefect server start": "starts a long-running server; "
    "tests/pipeline/test_pipeline_prefect.py starts one (deployments/local.py)",
    "python deployments/local.py down": "stops what `up` started",
    "prefect work-pool create sweflow --type process": "needs a running Prefect server; "
    "deployments/local.py does it in tests/pipeline/test_pipeline_prefect.py",
    "SWEFLOW_ROOT=$PWD prefect deploy --all --prefect-file deployments/prefect.yaml": "needs a "
    "running Prefect server; deployments/local.py does it in "
    "tests/pipeline/test_pipeline_prefect.py",
    "PYTHONPATH=$PWD prefect worker start --pool sweflow": "a long-running worker; "
    "deployments/local.py starts one in tests/pipeline/test_pipeline_prefect.py",
    "prefect deployment run 'end-to-end/demo' --watch": "the whole pipeline (as the demo)",
    "prefect deployment run 'evaluate/demo' --watch": "needs the deployments and a finished run",
    "prefect flow-run retry FLOW_RUN_ID": "needs a failed flow run's id; "
    "tests/pipeline/test_pipeline_prefect.py retries one",
    "prefect deployment run 'end-to-end/demo' --params "
    '\'{"config": {"force": ["validate_envs"]}}\'': "the whole pipeline again, one stage forced",
}

# Paths the results pages quote as history or as another project's files, not this tree's.
NOT_IN_THE_TREE = {
    "benchmarks/swebench.py": "the script that shadowed the swebench package until issue 29",
    "benchmarks/pipeline.py": "the pipeline benchmark's name as issue 27 filed it",
    "data/test-00000-of-00001.parquet": "a file of Hugging Face's SWE-bench_Verified dataset",
}

FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
PATH = re.compile(
    r"(?<![\w./-])((?:sweflow|configs|benchmarks|scripts|tests|data|flows|tasks|deployments|docs)"
    r"/[\w./-]*[\w/])((?:::\w+)*)"
)
DOTTED = re.compile(r"(?<![\w.])sweflow(?:\.\w+)+")
HASH = re.compile(r"(?<![\w/.-])[0-9a-f]{7,40}(?![\w/-])")
PLACEHOLDER = re.compile(r"[A-Z]{3,}|<|\*")  # benchmarks/NAME.py, <run_dir>/...


def _blocks(page: Path, kind: str) -> list[str]:
    return [body for lang, body in FENCE.findall(page.read_text()) if lang == kind]


def _prose(page: Path) -> str:
    """The page without its fenced blocks."""
    return FENCE.sub("", page.read_text())


def _command_lines(block: str) -> list[str]:
    """The command lines of a bash block: continuations joined, comments and a trailing ``&``
    (run in the background) dropped."""
    lines, current = [], ""
    for raw in block.splitlines():
        current += raw.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        words = shlex.split(current, comments=True)
        current = ""
        if words[-1:] == ["&"]:
            words.pop()
        if words:
            line = shlex.join(words)
            lines.append(line)
    return lines


def _shown_commands() -> dict[str, list[str]]:
    """{command line as shlex normalises it: the pages showing it}."""
    found: dict[str, list[str]] = {}
    for page in PAGES:
        for block in _blocks(page, "bash"):
            for line in _command_lines(block):
                found.setdefault(line, []).append(page.name)
    return found


SHOWN = _shown_commands()
SWEFLOW_LINES = sorted(line for line in SHOWN if line.startswith("sweflow "))
NOT_RUN = {shlex.join(shlex.split(line)): why for line, why in NOT_RUN_HERE.items()}


def test_the_site_builds_with_every_link_and_anchor_resolved(tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "search" / "search_index.json").is_file()


def test_the_readme_is_an_entry_point_of_at_most_250_lines() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"
    assert lines[3:5] == [  # the two commands come first
        "bash scripts/demo.sh   # set up everything, start Prefect (server + worker), deploy, "
        "run end-to-end/demo",
        "bash scripts/test.sh   # set up and run the test suite (slow tests only with "
        "SWEFLOW_SLOW=1 or CI=true)",
    ]


def test_the_readme_links_to_files_that_exist() -> None:
    for target in re.findall(r"\]\(([^)#\s]+)", README.read_text()):
        if "://" not in target:
            assert (REPO / target).exists(), f"README.md links to {target}, which is not there"


def _quoted(pages: list[Path]) -> list[tuple[str, str]]:
    """(page, code span) for every inline code span of the pages' prose."""
    return [(p.name, span) for p in pages for span in INLINE.findall(_prose(p))]


def test_every_quoted_repository_path_exists() -> None:
    missing = []
    for page, span in _quoted(ALL_PAGES):
        for path, tests in PATH.findall(span):
            if PLACEHOLDER.search(path) or path in NOT_IN_THE_TREE:
                continue
            file = REPO / path.partition(":")[0]
            if not file.exists():
                missing.append(f"{page}: {path}")
            for name in filter(None, tests.split("::")):
                if not re.search(rf"^\s*(def|class) {name}\b", file.read_text(), re.M):
                    missing.append(f"{page}: {path}{tests} (no {name})")
    assert not missing, "\n".join(missing)


def _defines(module: str, name: str) -> bool:
    """Whether ``module``'s source defines or lazily exports ``name`` (for modules whose
    optional dependencies, verl or vllm, are not installed here)."""
    spec = importlib.util.find_spec(module)
    assert spec and spec.origin, module
    source = Path(spec.origin).read_text()
    tree = ast.parse(source)
    for node in tree.body:
        names = []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names = [node.name]
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names = [(a.asname or a.name).split(".")[0] for a in node.names]
        if name in names:
            return True
    return f'"{name}":' in source  # a lazy export (sweflow.lazy)


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if found:
            break
    else:
        return False
    attrs = parts[cut:]
    if not attrs:
        return True
    try:
        value = importlib.import_module(module)
    except ImportError:  # an optional dependency: read the source instead
        return _defines(module, attrs[0])
    for attr in attrs:
        if not hasattr(value, attr):
            return False
        value = getattr(value, attr)
    return True


def test_every_quoted_sweflow_name_resolves() -> None:
    names = {(page, name) for page, span in _quoted(ALL_PAGES) for name in DOTTED.findall(span)}
    missing = sorted(f"{page}: {name}" for page, name in names if not _resolves(name))
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize("line", SWEFLOW_LINES)
def test_the_command_runs_as_shown_up_to_its_work(line, tmp_path, monkeypatch) -> None:
    words = shlex.split(line)
    if words[1] == "--dry-run":  # a page showing the dry run itself
        line = shlex.join([words[0], *words[2:]])
    check_dry_run(line, tmp_path, monkeypatch)


def test_every_other_command_shown_is_accounted_for() -> None:
    others = {line: pages for line, pages in SHOWN.items() if not line.startswith("sweflow ")}
    unaccounted = {line: pages for line, pages in others.items() if line not in NOT_RUN}
    assert not unaccounted, f"shown, neither run nor in NOT_RUN_HERE: {unaccounted}"
    stale = set(NOT_RUN) - set(others)
    assert not stale, f"in NOT_RUN_HERE, shown nowhere: {stale}"


def _python_blocks() -> list[tuple[str, str]]:
    return [(p.name, block) for p in PAGES for block in _blocks(p, "python")]


@pytest.mark.parametrize("page,block", _python_blocks())
def test_python_blocks_parse_and_their_imports_resolve(page, block) -> None:
    tree = ast.parse(block)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sweflow"):
            for alias in node.names:
                assert _resolves(f"{node.module}.{alias.name}"), f"{page}: {node.module}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("sweflow"):
                    assert _resolves(alias.name), f"{page}: {alias.name}"


@pytest.mark.isolating  # opens a local sandbox itself
def test_the_quickstart_sandbox_runs(tmp_path) -> None:
    """The README's Python quickstart, as written, in a real local sandbox (its copy on the
    getting-started page is the same block)."""
    blocks = {b for page in PAGES for b in _blocks(page, "python") if "host_rootfs()" in b}
    assert len(blocks) == 1, "the sandbox quickstart differs between pages"
    env = {**os.environ, "SWEFLOW_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", blocks.pop()], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "hello from a sandbox"


def test_every_command_is_on_the_command_line_page() -> None:
    page = (REPO / "docs" / "cli.md").read_text()
    missing = [" ".join(p) for p, _ in cli_commands() if f"`sweflow {' '.join(p)}`" not in page]
    assert not missing, f"docs/cli.md does not list: {missing}"


def test_pages_quote_no_commit_of_this_repository() -> None:
    tokens = {(page.name, t) for page in PAGES for t in HASH.findall(page.read_text())}
    tokens = {(page, t) for page, t in tokens if re.search(r"\d", t) and re.search("[a-f]", t)}
    if not tokens:
        return
    check = subprocess.run(
        ["git", "-C", str(REPO), "cat-file", "--batch-check"],
        input="".join(f"{t}^{{commit}}\n" for _, t in sorted(tokens)),
        capture_output=True,
        text=True,
    )
    if check.returncode != 0:
        pytest.skip(f"no git history to check against: {check.stderr.strip()}")
    commits = {line.split()[0] for line in check.stdout.splitlines() if " commit " in line}
    quoted = sorted(f"{page}: {t}" for page, t in tokens if any(c.startswith(t) for c in commits))
    assert not quoted, "commits belong in benchmarks/results/*.md:\n" + "\n".join(quoted)
