"""Shared fixtures. Slow artefacts (a debootstrapped Debian) are cached across test runs."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import stat
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import pytest

from sweflow.sandbox.rootfs import RootfsError, debootstrap_rootfs

if TYPE_CHECKING:
    from sweflow.envcache.dataset import Dataset

# A patch whose tests hang (a root conftest.py that sleeps): graded past a timeout, interrupted.
SLEEPY_PATCH = """diff --git a/conftest.py b/conftest.py
new file mode 100644
--- /dev/null
+++ b/conftest.py
@@ -0,0 +1,2 @@
+import time
+time.sleep(120)
"""


def cache_root() -> Path:
    """Where slow-to-build test artefacts live between runs (``$SWEFLOW_TEST_CACHE``)."""
    root = os.environ.get("SWEFLOW_TEST_CACHE") or Path.home() / ".cache" / "sweflow-test"
    return Path(root)


def pytest_configure(config: pytest.Config) -> None:
    """A SIGTERM (``timeout``, a CI runner ending the job) stops the run as Ctrl-C does: the
    fixtures' teardown then stops what they started (dockerd and its containers, the e2b
    endpoint, vLLM). Left to SIGTERM's default, pytest died at once and they ran on. And Ctrl-C
    reaches the commands the tests start even when the run itself began with it ignored."""
    signal.signal(signal.SIGTERM, _interrupt)
    # A background job of a non-interactive shell (a CI step, `bash .ci/run &`) starts with
    # SIGINT ignored, and every process the tests start would inherit that: the Ctrl-C tests'
    # commands then ran to the end. A handler of ours is reset to the default by exec instead.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


# What keeps a test out of the quick tier: a rootfs, environment builds (the wheelhouse), local
# sandboxes (root's namespaces), a docker daemon, the e2b endpoint, a model. A test that uses none
# of these fixtures, directly or through others, and is marked neither ``slow``, ``docker`` nor
# ``isolating`` (it opens sandboxes of an isolating backend some other way) is marked ``quick``.
NOT_QUICK = {
    "bookworm_rootfs",
    "wheelhouse",
    "open_local",
    "dockerd",
    "e2b_endpoint",
    "smollm2",
    "mlflow_uri",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Slow tests run last (each file's order kept), so a deadline (below) cuts only slow ones.
    items.sort(key=lambda item: item.get_closest_marker("slow") is not None)
    for item in items:
        heavy = NOT_QUICK.intersection(getattr(item, "fixturenames", ()))
        kept_out = {"slow", "docker", "isolating"}.intersection(m.name for m in item.iter_markers())
        if not heavy and not kept_out:
            item.add_marker(pytest.mark.quick)


@pytest.fixture(autouse=True)
def _quick_means_no_namespaces(request: pytest.FixtureRequest, monkeypatch) -> None:
    """Keeps the quick tier honest: a quick test that opens a local sandbox in this process
    fails, naming the marker it needs (``isolating``)."""
    if request.node.get_closest_marker("quick") is None:
        return
    from sweflow.sandbox.local import backend as local

    def refuse() -> Path:
        raise AssertionError(
            f"{request.node.nodeid} is in the quick tier but opens a local sandbox: mark it "
            "pytest.mark.isolating (or give it a fixture of conftest.NOT_QUICK)"
        )

    monkeypatch.setattr(local, "nsinit_path", refuse)


# A slow test's expected minutes on 2 cores, its fixtures' set-up included, where it does not
# say (``pytest.mark.slow(minutes=N)``).
SLOW_MINUTES = 3.0


def pytest_runtest_setup(item: pytest.Item) -> None:
    """CI stops the job at 90 minutes and the run must end within 45: a slow test that would
    end after ``$SWEFLOW_TEST_DEADLINE_MIN`` minutes from scripts/test.sh's start (its set-up
    counted; the test's expected minutes from its marker) is skipped with that reason, so the
    run still ends in time with every other test's verdict and as many slow ones as fit."""
    deadline = os.environ.get("SWEFLOW_TEST_DEADLINE_MIN")
    began = os.environ.get("SWEFLOW_TEST_BEGAN")
    slow = item.get_closest_marker("slow")
    if deadline and began and slow:
        spent = (time.time() - float(began)) / 60
        expected = float(slow.kwargs.get("minutes", SLOW_MINUTES))
        if spent + expected > float(deadline):
            pytest.skip(
                f"slow test not started: the run is {spent:.0f} minutes in and this test takes "
                f"about {expected:g}, past SWEFLOW_TEST_DEADLINE_MIN={deadline}"
            )


@pytest.fixture(scope="session")
def bookworm_rootfs() -> Path:
    """A Debian bookworm minbase rootfs (python3, git, ...) to use as a sandbox's base layer.

    Built once (~55 s here, needs root and Debian's mirror) and then reused from the cache dir.
    """
    if shutil.which("debootstrap") is None:
        reason = "debootstrap is not installed (apt-get install debootstrap)"
        print(f"bookworm_rootfs: skipped: {reason}")
        pytest.skip(reason)
    dest = cache_root() / "rootfs"
    try:
        return debootstrap_rootfs("bookworm", dest, progress=print)
    except RootfsError as first:  # a mirror hiccup should not fail the whole session
        print(f"bookworm_rootfs: first build failed, retrying once: {first}")
        return debootstrap_rootfs("bookworm", dest, progress=print)


@pytest.fixture(scope="session")
def wheelhouse() -> Path:
    """The wheels of the test data's specs (scripts/prefetch.py), for offline environment builds."""
    path = cache_root() / "wheelhouse"
    if not any(path.glob("pytest-*.whl")):
        pytest.fail(f"no wheelhouse at {path}: run `.venv/bin/python scripts/prefetch.py` first")
    return path


def path_snapshot(path: Path, contents: bool = True) -> tuple:
    """(mode, size, mtime, ctime, owner[, sha256 or link target]) of one path, not followed."""
    st = os.lstat(path)
    entry: tuple = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_uid, st.st_gid)
    if stat.S_ISLNK(st.st_mode):
        return (*entry, os.readlink(path))
    if contents and stat.S_ISREG(st.st_mode):
        return (*entry, hashlib.sha256(path.read_bytes()).hexdigest())
    return entry


def tree_snapshot(root: Path, contents: bool = True) -> dict[str, tuple]:
    """path_snapshot() of everything under ``root``: equal snapshots mean an untouched tree."""
    snap: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            snap[os.path.relpath(path, root)] = path_snapshot(path, contents)
    return snap


def cli_commands() -> list[tuple[tuple[str, ...], object]]:
    """Every leaf command of ``sweflow`` with its path, e.g. (("env", "build"), <Command>)."""
    import typer.main

    from sweflow.cli import app

    def walk(group, path: tuple[str, ...]) -> list:
        found = []
        for name, command in group.commands.items():  # typer's groups hold ``commands``
            found += (
                walk(command, (*path, name))
                if hasattr(command, "commands")
                else [((*path, name), command)]
            )
        return found

    return walk(typer.main.get_command(app), ())


def hand_upper(store, files: dict[str, bytes]) -> Path:
    """An upper of the LayerStore ``store`` holding ``files`` (relative path -> bytes), made by
    hand: a layer to commit without running a sandbox."""
    upper = store.new_upper()
    for name, data in files.items():
        (upper / name).parent.mkdir(parents=True, exist_ok=True)
        (upper / name).write_bytes(data)
    return upper


# -- local sandbox helpers (tests/test_sandbox_{local,security,soak}.py) -----------------------


def spec_for(rootfs: Path, *extra_layers: Path, **kw):
    """A SandboxSpec with ``rootfs`` as the base layer and ``extra_layers`` on top of it.

    ``workdir`` defaults to /testbed; every other keyword goes to SandboxSpec, and ``limits``
    may be a dict of Limits fields.
    """
    from sweflow.sandbox import Limits, SandboxSpec

    kw.setdefault("workdir", "/testbed")
    if isinstance(kw.get("limits"), dict):
        kw["limits"] = Limits(**kw["limits"])
    return SandboxSpec(layers=[rootfs, *extra_layers], **kw)


@pytest.fixture
def sandbox_spec(bookworm_rootfs: Path):
    """``sandbox_spec(*extra_layers, **kw)``: spec_for() on the bookworm rootfs."""

    def make(*extra_layers: Path, **kw):
        return spec_for(bookworm_rootfs, *extra_layers, **kw)

    return make


@pytest.fixture
def open_backend():
    """``open_backend(spec, backend)`` opens a sandbox; whatever the test leaves open is closed."""
    from sweflow.sandbox import open_sandbox

    opened = []

    def _open(spec, backend: str):
        sb = open_sandbox(spec, backend)
        opened.append(sb)
        return sb

    yield _open
    for sb in opened:
        sb.close()


@pytest.fixture
def open_local(open_backend):
    """``open_local(spec)`` opens a local sandbox; whatever the test leaves open is closed."""
    return lambda spec: open_backend(spec, "local")


@pytest.fixture
def scratch_spec():
    """``scratch_spec(*layers, **kw)``: spec_for() on the host's own files (``/``, which the
    scratch backend runs on and does not copy), for the scratch backend."""
    return lambda *layers, **kw: spec_for(Path("/"), *layers, **kw)


@pytest.fixture
def scratch(scratch_spec, open_backend):
    """``scratch(*layers, **kw)`` opens a scratch sandbox of ``layers`` on the host's own files
    (no rootfs, root or namespaces; its workdir is where its ``spec.workdir`` says): for tests
    about the agent, grading logic or plumbing, not about isolation. Closed after the test."""
    return lambda *layers, **kw: open_backend(scratch_spec(*layers, **kw), "scratch")


@pytest.fixture
def local_sandbox(sandbox_spec, open_local):
    """An open local sandbox on the bookworm rootfs, workdir /testbed, default limits."""
    return open_local(sandbox_spec())


@pytest.fixture
def git_layer(tmp_path: Path) -> Path:
    """A layer holding a git repository at /testbed with one commit (hello.py, README.md)."""
    import subprocess

    layer = tmp_path / "git-layer"
    repo = layer / "testbed"
    repo.mkdir(parents=True)
    (repo / "hello.py").write_text("def hello():\n    return 'hello'\n")
    (repo / "README.md").write_text("# demo\n")
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "init"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)
    return layer


# -- real instances built offline (tests/agent/, tests/serving/test_serving_vllm.py) ----------


@pytest.fixture(scope="session")
def more_itertools_mirror(tmp_path_factory: pytest.TempPathFactory, bookworm_rootfs: Path) -> Path:
    """A repo-mirror folder holding the more-itertools bundle of tests/data/envcache (bare)."""
    import subprocess

    root = tmp_path_factory.mktemp("mirror")
    bundle = Path(__file__).parent / "data" / "envcache" / "more-itertools__more-itertools.bundle"
    target = root / "more-itertools__more-itertools.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(bundle), str(target)], check=True)
    return root


# -- docker daemon for the docker backend's tests (tests/sandbox/test_docker_backend.py) -------


@pytest.fixture(scope="session")
def parse_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git repository of the parse 1.20.2 sdist (the demo set's base commit): a synth source."""
    dest = tmp_path_factory.mktemp("src") / "parse"
    bundle = Path(__file__).parents[1] / "data" / "demo" / "repos" / "pypi__parse.bundle"
    subprocess.run(["git", "clone", "-q", "-b", "main", str(bundle), str(dest)], check=True)
    return dest


@pytest.fixture(scope="session")
def dockerd():
    """A docker client for a daemon that answers, exported as DOCKER_HOST meanwhile.

    An already-running daemon is used as is; otherwise one is started with its data root in the
    test cache dir (images persist across runs) and stopped by its PID at the end. Skips,
    printing why, when none can start.
    """
    try:
        import docker
    except ImportError:
        pytest.skip("the docker SDK is not installed (pip install 'sweflow[test]')")
    from sweflow.sandbox.docker.daemon import docker_daemon
    from sweflow.sandbox.errors import SandboxError

    with contextlib.ExitStack() as stack:
        try:
            host = stack.enter_context(docker_daemon(cache_root() / "docker"))
        except SandboxError as exc:
            print(f"dockerd: skipped: {exc}")
            pytest.skip(str(exc))
        client = docker.DockerClient(base_url=host)
        stack.callback(client.close)
        yield client


# -- built instances for the grading tests (tests/test_grading_*.py) ---------------------------


@pytest.fixture(scope="session")
def grading_dataset(tmp_path_factory, wheelhouse: Path, bookworm_rootfs: Path):
    """Load a dataset (specs.yaml beside it, repos/*.bundle) and build every instance (or
    ``data.sample(sample)``'s), once per dataset per session:
    ``grading_dataset(path, sample=None) -> (Dataset, its store)``."""
    from sweflow.envcache.dataset import Dataset

    loaded: dict[tuple[Path, int | None], tuple[Dataset, Path]] = {}

    def load(dataset: Path, sample: int | None = None) -> tuple[Dataset, Path]:
        dataset = dataset.resolve()
        if (dataset, None) in loaded:  # every instance built: any sample is there
            return loaded[dataset, None]
        if (dataset, sample) not in loaded:
            store = tmp_path_factory.mktemp("grading-store")
            data = Dataset.load(dataset)
            rows = data.rows if sample is None else data.sample(sample)
            results = data.builder(store, wheelhouse=wheelhouse).build(rows)
            failed = [r for r in results if r.status == "error"]
            assert not failed, [(r.instance_id, r.error) for r in failed]
            loaded[dataset, sample] = data, store
        return loaded[dataset, sample]

    return load


@pytest.fixture(scope="session")
def grading_built(grading_dataset):
    """The dataset the grading tests run on, built: (Dataset, store). tests/data/envcache
    (SWE-bench rows of more-itertools), or ``SWEFLOW_GRADING_DATASET`` (e.g.
    data/demo/tasks.jsonl)."""
    default = Path(__file__).parent / "data" / "envcache" / "instances.jsonl"
    return grading_dataset(Path(os.environ.get("SWEFLOW_GRADING_DATASET") or default))


@pytest.fixture(scope="session")
def grading_data(grading_built):
    """The grading tests' dataset (``grading_built``), its every row built in ``grading_store``."""
    return grading_built[0]


@pytest.fixture(scope="session")
def grading_store(grading_built) -> Path:
    """The layer store holding ``grading_data``'s built instances."""
    return grading_built[1]


# -- models and golden trajectories for the training tests (tests/test_training_*.py) ----------


@contextlib.contextmanager
def sweflow_serve(model: Path, name: str, log_dir: Path):
    """`sweflow serve` of ``model`` as ``name`` in a child process until the block ends (SIGINT,
    by PID): yields (base URL, its stdout file, the process) once vLLM is healthy."""
    import socket
    import subprocess
    import sys
    import time

    from sweflow.serving.vllm import healthy

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = log_dir / f"serve-{Path(name).name}.out"  # a name may be a path (SkyRL's)
    argv = [sys.executable, "-m", "sweflow.cli", "serve", "--model", str(model)]
    argv += ["--port", str(port), "--served-name", name, "--max-model-len", "4096"]
    argv += ["--vllm-arg=--trust-request-chat-template"]  # /tokenize with a test template
    with log.open("w") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "COLUMNS": "400"}
        )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 900
        while not healthy(url):
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "vLLM was not healthy within 900 s"
            time.sleep(2)
        yield url, log, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=120)


@pytest.fixture(scope="session")
def smollm2() -> Path:
    """SmolLM2-135M-Instruct as a Hugging Face folder, made once from its registry wheel."""
    from sweflow.serving import resolve_model

    return resolve_model("smollm2-135m-instruct", cache=cache_root() / "models")


@pytest.fixture(scope="session")
def tiny_smollm2(smollm2: Path) -> Path:
    """SmolLM2 cut to its first two layers: the same architecture, tokenizer and chat template,
    trained in seconds a step on a CPU (a real model, not a random one)."""
    import json

    dest = cache_root() / "models" / "smollm2-2-layers"
    if (dest / "config.json").is_file():
        return dest
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(smollm2), dtype=torch.float32)
    model.model.layers = model.model.layers[:2]
    model.config.num_hidden_layers = 2
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial, safe_serialization=True)
    AutoTokenizer.from_pretrained(str(smollm2)).save_pretrained(partial)
    config = json.loads((partial / "config.json").read_text())
    assert config["num_hidden_layers"] == 2
    partial.rename(dest)
    return dest


class Replays(NamedTuple):
    """Three demo tasks built offline, one per project, and their replayed golden trajectories."""

    data: Dataset  # the three tasks
    store: Path  # their built environments
    collected: Path  # the collect folder: sft.jsonl, trajectories/


@pytest.fixture(scope="session")
def demo_replays(tmp_path_factory, wheelhouse: Path, bookworm_rootfs: Path) -> Replays:
    """Three demo tasks built offline, one per project, and their replayed golden trajectories
    (text mode)."""
    from sweflow.agent.runs.jobs import replay_collect
    from sweflow.envcache.dataset import Dataset

    demo = Path(__file__).resolve().parent.parent / "data" / "demo" / "tasks.jsonl"
    store = tmp_path_factory.mktemp("replay-store")
    data = Dataset.load(demo)
    rows = data.sample(9)  # three per project: the teacher declines a few tasks
    assert not [
        r for r in data.builder(store, wheelhouse=wheelhouse).build(rows) if r.status == "error"
    ]
    tried = replay_collect(
        rows,
        store=store,
        specs=data.specs,
        out_dir=tmp_path_factory.mktemp("replays-tried"),
    )
    firsts: dict = {}  # repo -> its first task the teacher replays
    for row in rows:
        if row.instance_id not in tried.skipped:
            firsts.setdefault(row.repo, row)
    data = replace(data, rows=list(firsts.values()))
    out = tmp_path_factory.mktemp("replays")
    summary = replay_collect(data.rows, store=store, specs=data.specs, out_dir=out)
    assert summary.kept == 3, summary
    return Replays(data, store, out)


@pytest.fixture(scope="session")
def rl_policy(tiny_smollm2: Path, demo_replays, tmp_path_factory) -> Path:
    """The two-layer SmolLM2 fine-tuned briefly on the demo tasks' replays: it writes (mostly)
    well-formed tool blocks (the RL tests' policy). Each replay is cut to its start and last
    turns (``overlength: truncate``). Sampled at temperature 1 this small a model mostly writes
    the replays' one common reply, the final submit, whichever way they are cut (7 and 8 of 8
    episodes, measured): the RL tests sample at 1.5, where a group's episodes differ."""
    from sweflow.training.sft.config import SFTConfig
    from sweflow.training.sft.train import train_sft

    work = tmp_path_factory.mktemp("rl-policy")
    sft = SFTConfig(
        epochs=3,
        learning_rate=1e-3,
        max_seq_len=1024,
        activation_checkpointing=False,
        overlength="truncate",
    )
    train_sft(demo_replays.collected / "sft.jsonl", tiny_smollm2, work, work / "model", sft)
    return work / "model"


@pytest.fixture(scope="session")
def rl_env(demo_replays):
    """Where the RL tests' episodes run: local sandboxes of the demo replays' store, graded
    with the tamper guard, the agent in text mode for 3 steps."""
    from sweflow.agent.config import AgentConfig
    from sweflow.cluster.local import LocalExecutor
    from sweflow.grading import Grader
    from sweflow.training.rl.trainer import episode_env

    grader = Grader(demo_replays.store, demo_replays.data.specs, tamper_guard=True)
    return episode_env(
        LocalExecutor(demo_replays.store),
        grader,
        AgentConfig(tool_mode="text", max_steps=3),
        "local",
    )


def trained_as_sampled(episode, encoder) -> None:
    """Asserts the RL contract on a finished episode: the tokens trained are exactly the tokens
    the policy sampled (each unmasked run decodes to the reply the agent read), with their
    log-probabilities, and the masked tokens are the chat template's framing of the
    observations."""
    n = len(episode.response_ids)
    assert len(episode.mask) == n == len(episode.logprobs) and sum(episode.mask) > 0
    assert all(lp == 0.0 for lp, m in zip(episode.logprobs, episode.mask, strict=True) if not m)
    assert all(lp <= 0.0 for lp, m in zip(episode.logprobs, episode.mask, strict=True) if m)
    runs, current = [], []
    for token, trained in zip(episode.response_ids, episode.mask, strict=True):
        if trained:
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    replies = [m["content"] for m in episode.trajectory.messages if m["role"] == "assistant"]
    eos = encoder.tokenizer.eos_token_id
    decoded = [encoder.tokenizer.decode(r[:-1] if r[-1] == eos else r) for r in runs]
    assert decoded == replies
    messages = episode.trajectory.messages
    last_reply = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    seen = messages[2:last_reply]  # what came after the last reply never reached the policy
    observations = [m["content"] for m in seen if m["role"] == "user"]
    assert observations
    framing = encoder.tokenizer.decode(
        [t for t, m in zip(episode.response_ids, episode.mask, strict=True) if not m]
    )
    assert all(obs[:100] in framing for obs in observations)


# -- sweflow's E2B endpoint for the e2b backend and the SDK tests (tests/e2b_endpoint/) ------


@pytest.fixture(scope="session")
def e2b_endpoint(bookworm_rootfs: Path, tmp_path_factory):
    """The endpoint (its URL and API key), exported to the e2b SDK (E2B_API_URL,
    E2B_SANDBOX_URL, E2B_API_KEY) meanwhile.

    Its `base` template is the bookworm rootfs; `layers:` templates may use the test cache, the
    base rootfs cache and the session's temporary directories (the contract suite's layers, the
    grading stores).
    """
    pytest.importorskip("e2b", reason="the e2b SDK is not installed (pip install 'sweflow[e2b]')")
    from sweflow.e2b_endpoint.launch import local_endpoint

    log = tmp_path_factory.mktemp("e2b") / "endpoint.log"
    from sweflow.paths import rootfs_cache

    roots = (cache_root(), rootfs_cache(), tmp_path_factory.getbasetemp())
    with local_endpoint(bookworm_rootfs, log, roots) as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def mlflow_uri(tmp_path_factory) -> str:
    """A real MLflow tracking server on loopback for the session (tests/tracking_servers.py):
    its URI; stopped by its PID at the end."""
    from tracking_servers import mlflow_server

    with mlflow_server(tmp_path_factory.mktemp("mlflow")) as uri:
        yield uri
