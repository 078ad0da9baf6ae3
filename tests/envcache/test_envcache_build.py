"""Building and validating real environments: more-itertools releases, its real test suite.

The data (tests/data/envcache) is a git bundle of real PyPI releases and SWE-bench-format
instances whose FAIL_TO_PASS/PASS_TO_PASS were computed by running pytest; environments are
built offline from the wheelhouse that scripts/prefetch.py fills.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sweflow.cli import app
from sweflow.envcache.builder import RECIPE, BuildOptions, EnvBuilder, instance_sandbox_spec
from sweflow.envcache.cleanup import gc
from sweflow.envcache.repos import scm_version
from sweflow.envcache.store import LayerStore
from sweflow.envcache.validate import Prepared, judge, validate
from sweflow.errors import SweflowError
from sweflow.harness.evalscript import EvalRun
from sweflow.harness.specs import SpecTable, load_specs
from sweflow.instances import Instance, load_instances
from sweflow.sandbox import open_sandbox
from sweflow.sandbox.rootfs import MARKER

DATA = Path(__file__).parents[1] / "data" / "envcache"
DATASET = DATA / "instances.jsonl"
REPO = "more-itertools/more-itertools"


@pytest.fixture(scope="module")
def instances() -> list[Instance]:
    return load_instances(DATASET).raise_for_errors()


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mirror")
    bundle = DATA / "more-itertools__more-itertools.bundle"
    target = root / "more-itertools__more-itertools.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(bundle), str(target)], check=True)
    return root


@pytest.fixture(scope="module")
def builder(tmp_path_factory, mirror: Path, wheelhouse: Path, bookworm_rootfs: Path) -> EnvBuilder:
    options = BuildOptions(
        store=tmp_path_factory.mktemp("store"),
        repo_mirror=mirror,
        wheelhouse=wheelhouse,
        base=None,
    )
    return EnvBuilder(load_specs(DATA / "specs.yaml"), options)


@pytest.fixture(scope="module")
def built(builder: EnvBuilder, instances: list[Instance]):
    return builder.build(instances)


def test_every_instance_builds_on_one_shared_environment(builder, built, instances) -> None:
    assert [r.status for r in built] == ["built"] * len(instances), [r.error for r in built]
    stacks = [builder.store.read_manifest(i.instance_id).layers for i in instances]
    assert all([layer.kind for layer in s] == ["base", "env", "instance"] for s in stacks)
    assert len({s[1].digest for s in stacks}) == 1  # the environment layer is stored once
    assert len({s[2].digest for s in stacks}) == len(instances)


def test_rebuild_is_a_no_op(builder, built, instances) -> None:
    again = builder.build(instances)
    assert [r.status for r in again] == ["cached"] * len(instances)


def test_sandbox_on_an_instance_is_ready_to_run_tests(builder, built, instances) -> None:
    instance = instances[0]
    with open_sandbox(instance_sandbox_spec(builder.store, instance.instance_id)) as sb:
        assert sb.exec("git rev-parse HEAD").output.strip() == instance.base_commit
        assert sb.exec("git status --porcelain").output == ""
        located = sb.exec("python -c 'import more_itertools as m; print(m.__file__)'")
        assert located.output.startswith("/testbed/"), located.output
        assert sb.exec("python -m pytest --version").ok
        assert sb.diff() == ""
        # a checkout holds no tags: setuptools_scm's version as a full clone gives it, for the
        # eval script's re-install as for the build's install
        version = sb.exec("echo $SETUPTOOLS_SCM_PRETEND_VERSION").output.strip()
    git_dir = builder.options.repo_mirror / f"{REPO.replace('/', '__')}.git"
    assert version and version == scm_version(git_dir, instance.base_commit)


def test_one_bad_instance_does_not_stop_the_others(builder, built, instances) -> None:
    missing = instances[0].model_copy(update={"instance_id": "bad-commit", "base_commit": "0" * 40})
    no_spec = instances[0].model_copy(update={"instance_id": "bad-version", "version": "9.9"})
    results = {r.instance_id: r for r in builder.build([missing, instances[1], no_spec])}
    assert results[instances[1].instance_id].status == "cached"
    assert results["bad-commit"].status == "error" and "0" * 40 in results["bad-commit"].error
    assert not results["bad-commit"].log_path  # the mirror lacks it: refused before building
    assert results["bad-version"].status == "error" and "9.9" in results["bad-version"].error
    assert "BUILD ERROR" in Path(results["bad-version"].log_path).read_text()
    assert not list(builder.store.tmp.glob("upper*"))  # the failed layer's upper went at once


def test_validation_outcomes_on_real_runs(builder, built, instances, tmp_path: Path) -> None:
    real = instances[-1]
    no_fix = real.model_copy(update={"instance_id": "no-fix", "patch": ""})
    passing = real.model_copy(
        update={"instance_id": "p2p-as-f2p", "FAIL_TO_PASS": real.PASS_TO_PASS[:1]}
    )
    broken = real.model_copy(update={"instance_id": "unbuilt", "base_commit": "f" * 40})
    rows = [real, no_fix, passing, broken]
    results = {r.instance_id: r for r in builder.build(rows)}
    # the copies build under their own ids; their instance layer dedups with the real one
    prepared = [builder.prepare_validation(row, results[row.instance_id]) for row in rows]
    outcomes = {v.instance_id: v for v in validate(prepared, tmp_path / "logs", runs=1)}
    assert outcomes[real.instance_id].outcome == "valid", outcomes[real.instance_id].reason
    assert outcomes["no-fix"].outcome == "gold_fails"
    assert outcomes["p2p-as-f2p"].outcome == "f2p_passes_without_fix"
    assert outcomes["unbuilt"].outcome == "build_error"
    log_dir = Path(outcomes[real.instance_id].log_path)
    assert (log_dir / "gold-1.log").read_text().count(">>>>> Start Test Output") >= 1


def _run(statuses: dict[str, str]) -> EvalRun:
    return EvalRun(Path("x.log"), statuses=statuses, parsed=True)


def test_judge_flags_a_test_that_changes_verdict_between_runs() -> None:
    row = Instance(
        instance_id="o__r-1", repo="o/r", base_commit="a", FAIL_TO_PASS=["t1"], PASS_TO_PASS=["t2"]
    )
    ok = {"t1": "PASSED", "t2": "PASSED"}
    flaky_gold = [_run(ok), _run({"t1": "PASSED", "t2": "FAILED"})]
    assert judge(row, flaky_gold, [_run({"t1": "FAILED"})])[0] == "flaky"
    flaky_base = [_run({"t1": "FAILED"}), _run({"t1": "PASSED"})]
    assert judge(row, [_run(ok)], flaky_base)[0] == "flaky"
    assert judge(row, [_run(ok), _run(ok)], [_run({"t1": "FAILED"})] * 2)[0] == "valid"


def test_validation_of_an_unbuilt_instance_names_the_build_log(tmp_path: Path) -> None:
    row = Instance(instance_id="o__r-2", repo="o/r", base_commit="a")
    prep = Prepared(row, None, "", build_error="commit a is missing", build_log="/x/build.log")
    [result] = validate([prep], tmp_path)
    assert (result.outcome, result.reason, result.log_path) == (
        "build_error",
        "commit a is missing",
        "/x/build.log",
    )


def test_an_instance_built_from_another_spec_is_built_again(builder, built, instances) -> None:
    """Its manifest records what it was built from: after a spec edit, the next build (of env
    build, env validate, eval, the pipeline's build stage) builds it again, naming why; an edit
    of what only the tests read (test_cmd) rebuilds nothing."""
    row = instances[0].model_copy(update={"instance_id": "edited-spec"})
    assert [r.status for r in builder.build([row])] == ["built"]
    spec = builder.specs.get(REPO, row.version)
    spec = spec.model_copy(update={"install": spec.install + " && echo v2 > .v2"})
    edited = EnvBuilder(SpecTable({REPO: {row.version: spec}}), builder.options)
    [result] = edited.build([row])
    assert result.status == "built", result.error
    first = Path(result.log_path).read_text().splitlines()[0]
    assert "built from other inputs than its row and spec give now (build_digest" in first
    with open_sandbox(edited.sandbox_spec(row.instance_id)) as sb:
        assert sb.exec("cat /testbed/.v2").output == "v2\n"
    spec = spec.model_copy(update={"test_cmd": "pytest -x"})
    tests_only = EnvBuilder(SpecTable({REPO: {row.version: spec}}), builder.options)
    assert [r.status for r in tests_only.build([row])] == ["cached"]


def test_an_install_that_fails_inside_an_and_list_fails_the_build(
    builder, built, instances
) -> None:
    """`a && b` with `a` failing: bash's `set -e` does not stop inside such a list, and such an
    install was stored as built. Each spec command runs as a group: the build fails, naming
    the step, and nothing is stored."""
    row = instances[0].model_copy(update={"instance_id": "failing-install"})
    spec = builder.specs.get(REPO, row.version).model_copy(update={"install": "false && true"})
    failing = EnvBuilder(SpecTable({REPO: {row.version: spec}}), builder.options)
    [result] = failing.build([row])
    assert result.status == "error" and "install step exited 1" in result.error
    assert failing.store.read_manifest(row.instance_id) is None


def test_instances_store_the_files_their_commits_share_once(builder, built, instances) -> None:
    """Each instance layer is its commit's checkout; a file two commits share is one file in the
    store, and each checkout's index still matches it by stat (git re-hashes nothing)."""
    first, second = (builder.store.read_manifest(i.instance_id).layers[2] for i in instances[:2])
    a, b = (builder.store.layers / layer.digest / "testbed" for layer in (first, second))
    rels = [
        p.relative_to(a)
        for p in a.rglob("*")
        if p.is_file() and p.stat().st_size and ".git" not in p.parts
    ]
    same = [r for r in rels if (b / r).is_file() and (b / r).read_bytes() == (a / r).read_bytes()]
    assert len(same) > 3
    assert all((a / rel).stat().st_ino == (b / rel).stat().st_ino for rel in same)
    for instance in instances[:2]:
        with open_sandbox(instance_sandbox_spec(builder.store, instance.instance_id)) as sb:
            stale = sb.exec("git diff-files --name-only")
        assert stale.ok and stale.output == "", stale.output


def test_environments_of_the_same_packages_share_their_files(builder, built, instances, tmp_path):
    """Two environment layers that install the same pytest (one spec has a step more) hold its
    sources and .pyc files once: pip compiled hash-checked .pyc files (the same bytes in every
    build), and a sandbox imports them as they are, writing no new one."""
    row = instances[0].model_copy(update={"instance_id": "same-packages-other-env"})
    spec = builder.specs.get(REPO, row.version)
    spec = spec.model_copy(update={"pre_install": [*spec.pre_install, "echo other > /opt/other"]})
    other = EnvBuilder(SpecTable({REPO: {row.version: spec}}), builder.options)
    assert [r.status for r in other.build([row])] == ["built"]
    envs = [
        builder.store.read_manifest(iid).layers[1]
        for iid in (instances[0].instance_id, row.instance_id)
    ]
    assert envs[0].digest != envs[1].digest
    site = "venv/lib/python3.11/site-packages/_pytest"
    roots = [builder.store.layers / env.digest for env in envs]
    sources = [next(root.glob(f"**/{site}/main.py")) for root in roots]
    pycs = [next(s.parent.glob("__pycache__/main.*.pyc")) for s in sources]
    assert sources[0].stat().st_ino == sources[1].stat().st_ino
    assert pycs[0].stat().st_ino == pycs[1].stat().st_ino
    assert pycs[0].read_bytes()[4:8] == (3).to_bytes(4, "little")  # PEP 552: checked hash
    upper = tmp_path / "upper"
    upper.mkdir()
    spec = instance_sandbox_spec(other.store, row.instance_id, upper="disk", upper_dir=upper)
    with open_sandbox(spec) as sb:
        assert sb.exec("python -c 'import _pytest.main, _pytest.python'").ok
    assert not [p for p in upper.rglob("*.pyc") if "site-packages" in str(p)]


_FAKE_APT = (  # what `apt-get update && apt-get install` leaves (no network here)
    "mkdir -p /var/cache/apt/archives /var/lib/apt/lists/partial"
    " && echo deb > /var/cache/apt/archives/gcc-12_amd64.deb"
    " && echo cache > /var/cache/apt/pkgcache.bin && echo cache > /var/cache/apt/srcpkgcache.bin"
    " && echo index > /var/lib/apt/lists/deb.debian.org_debian_dists_bookworm_InRelease"
    " && echo installed > /opt/installed"
)
_TEMP_NAME = "python -c 'import tempfile; print(next(tempfile._get_candidate_names()))'"


def test_built_layers_hold_no_apt_caches_and_installs_draw_the_same_temp_names(
    builder, built, instances
) -> None:
    """An environment's apt step leaves no downloaded package, binary cache or index in its
    layer (what it installed stays); two commits' install steps draw the same temporary names
    (Cython writes pip's build-environment path into what it compiles), and the seed is gone
    from the layers: a sandbox's Python draws random names again."""
    spec = builder.specs.get(REPO, instances[0].version)
    spec = spec.model_copy(
        update={
            "pre_install": [*spec.pre_install, _FAKE_APT],
            "install": f"{spec.install} && {_TEMP_NAME} > temp-name.txt",
        }
    )
    rows = [i.model_copy(update={"instance_id": f"seeded-{i.instance_id}"}) for i in instances[:2]]
    other = EnvBuilder(SpecTable({REPO: {rows[0].version: spec}}), builder.options)
    assert [r.status for r in other.build(rows)] == ["built", "built"]
    manifests = [builder.store.read_manifest(row.instance_id) for row in rows]
    env = builder.store.layers / manifests[0].layers[1].digest
    assert (env / "opt/installed").is_file()
    assert not [p for p in (env / "var").rglob("*") if p.is_file()]
    names = []
    for manifest in manifests:
        layer = builder.store.layers / manifest.layers[2].digest
        names.append((layer / "testbed/temp-name.txt").read_text())
        assert not list(layer.rglob("*seeded*.pth"))
    assert names[0] == names[1], names
    assert not list(env.rglob("*seeded*.pth"))
    with open_sandbox(instance_sandbox_spec(builder.store, rows[0].instance_id)) as sb:
        drawn = {sb.exec(_TEMP_NAME).output for _ in range(2)}
    assert len(drawn) == 2 and names[0] not in drawn


def test_an_instance_built_by_an_older_recipe_is_built_again(builder, built, instances) -> None:
    """What the builder makes of a spec changed (RECIPE bumped: here, the checkout's mtimes
    and the hash-checked .pyc files): an instance stored by the old recipe is built again."""
    row = instances[0].model_copy(update={"instance_id": "older-recipe"})
    assert [r.status for r in builder.build([row])] == ["built"]
    manifest = builder.store.read_manifest(row.instance_id)
    assert manifest.meta["recipe"] == RECIPE
    meta = {**manifest.meta, "recipe": "env4.instance1"}
    builder.store.write_manifest(row.instance_id, manifest.layers, meta)
    [result] = builder.build([row])
    assert result.status == "built", result.error
    first = Path(result.log_path).read_text().splitlines()[0]
    assert f"recipe env4.instance1 -> {RECIPE}" in first
    assert [r.status for r in builder.build([row])] == ["cached"]


def test_an_instance_built_on_another_base_is_built_again(
    builder, built, instances, tmp_path: Path
) -> None:
    """A rootfs rebuilt with other packages (the base gained make) is another base layer: an
    instance standing on the old one is not what a build makes now, so it is built again,
    naming why, and ``stored_layers`` stops vouching for it until then."""
    row = instances[0].model_copy(update={"instance_id": "older-base"})
    assert [r.status for r in builder.build([row])] == ["built"]
    manifest = builder.store.read_manifest(row.instance_id)
    assert builder.stored_layers(row) == [layer.digest for layer in manifest.layers]
    old_base = tmp_path / "debian-bookworm-before"
    old_base.mkdir()
    (old_base / MARKER).write_text('{"suite": "bookworm", "packages": ["python3"]}')
    old = builder.store.import_dir(old_base, "base")
    builder.store.write_manifest(row.instance_id, [old, *manifest.layers[1:]], manifest.meta)
    assert builder.stored_layers(row) is None
    [result] = builder.build([row])
    assert result.status == "built", result.error
    first = Path(result.log_path).read_text().splitlines()[0]
    assert f"built on another base ({old.digest[:12]} -> {manifest.layers[0].digest[:12]})" in first
    assert builder.stored_layers(row) == result.layers
    assert [r.status for r in builder.build([row])] == ["cached"]


def test_cli_build_validate_and_gc(mirror: Path, wheelhouse: Path, tmp_path: Path, instances):
    runner = CliRunner()
    store, out, report = tmp_path / "store", tmp_path / "valid.jsonl", tmp_path / "report"
    first = instances[0].instance_id
    common = ["-d", str(DATASET), "--repo-mirror", str(mirror), "--store", str(store)]
    common += ["--wheelhouse", str(wheelhouse), "-i", first]
    result = runner.invoke(app, ["env", "build", *common, "--pack", "squashfs"])
    assert result.exit_code == 0, result.output
    assert "built" in result.stdout and "packed 2 layer(s) as squashfs" in result.stdout
    unpacked = [p for p in (store / "layers").iterdir() if p.is_dir() and not p.is_symlink()]
    assert unpacked == []  # only images (and the base, by reference): validation mounts them
    result = runner.invoke(
        app, ["env", "validate", *common, "--out", str(out), "--report", str(report)]
    )
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["instance_id"] for line in out.read_text().splitlines()] == [first]
    summary = json.loads((report / "validation.json").read_text())
    assert summary["counts"] == {"valid": 1}
    assert "| valid |" in (report / "validation.md").read_text()
    result = runner.invoke(app, ["env", "gc", "--store", str(store), "-d", str(tmp_path / "no")])
    assert result.exit_code != 0  # a dataset that does not exist is an error, not "remove all"
    result = runner.invoke(app, ["env", "gc", "--store", str(store)])
    assert result.exit_code == 0, result.output
    assert LayerStore(store).has_instance(first)  # gc keeps what manifests reference
    other = tmp_path / "other.jsonl"  # a dataset without the instance: validated just now, kept
    other.write_text(instances[1].model_dump_json() + "\n")
    result = runner.invoke(app, ["env", "gc", "--store", str(store), "-d", str(other)])
    assert result.exit_code == 0, result.output
    assert f"kept manifest {first}: in use" in result.stdout and "run gc again" in result.stdout
    gc(LayerStore(store), keep_instances=set(), grace_s=0)  # drop all: images are unmounted
    with open("/proc/self/mountinfo") as f:
        assert str(store) not in f.read()


def test_env_shell_opens_the_instance_interactively(builder, built, instances) -> None:
    if shutil.which("script") is None:
        pytest.skip("util-linux `script` is not installed")
    instance = instances[0]
    cli = (
        f"{sys.executable} -m sweflow.cli env shell {instance.instance_id} -s {builder.store.root}"
    )
    typed = "echo HEAD=$(git rev-parse HEAD) at $(pwd); exit 3\n"
    argv = ["script", "-qec", cli, "/dev/null"]
    result = subprocess.run(argv, input=typed, capture_output=True, text=True, timeout=60)
    assert f"HEAD={instance.base_commit} at /testbed" in result.stdout, result.stdout
    assert result.returncode == 3


def test_a_python_no_debian_suite_ships_comes_from_the_host(
    tmp_path, mirror, wheelhouse, instances
):
    """python 3.10: no suite has it, so pyenv's interpreter is copied into a layer of its own."""
    from sweflow.envcache.runtimes import find_runtime

    try:
        runtime = find_runtime("3.10", None)
    except SweflowError as exc:
        pytest.skip(f"no host Python 3.10: {exc}")
    options = BuildOptions(store=tmp_path / "store", repo_mirror=mirror, wheelhouse=wheelhouse)
    builder = EnvBuilder(load_specs(DATA / "specs.yaml"), options)
    row = instances[0].model_copy(update={"instance_id": "py310", "version": "py310"})
    [result] = builder.build([row])
    assert result.status == "built", result.error
    kinds = [layer.kind for layer in builder.store.read_manifest("py310").layers]
    assert kinds == ["base", "python", "env", "instance"]
    with open_sandbox(builder.sandbox_spec("py310")) as sb:
        assert sb.exec("python --version").output.startswith("Python 3.10")
        assert sb.exec(f"test -x {runtime.python}").ok
        assert sb.exec("python -m pytest -q tests/test_recipes.py -x 2>&1 | tail -1").ok
