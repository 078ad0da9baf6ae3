"""Builds the layer stack of each instance: base -> (python) -> environment -> instance.

- base: a Debian suite whose own Python matches the spec (bullseye 3.9, bookworm 3.11, trixie
  3.13), or the ``base`` the user names;
- python: for other versions, an interpreter found on the host (pyenv's), copied into a layer at
  its own absolute path so that its hard-coded prefix keeps working, on a bookworm base;
- environment, one per (base, python, spec digest): a venv at /opt/sweflow/venv with the spec's
  packages, shared by every instance of that (repo, version);
- instance: the repository at ``base_commit`` in /testbed, installed into the venv, captured as
  the diff over the layers below.

Each layer is made in a sandbox with an on-disk upper directory and committed to the
content-addressed store. Building is idempotent (an instance with a complete manifest is
skipped), concurrent (bounded) and isolated (one instance's failure is reported with its log).
"""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date
from functools import partial
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from sweflow.envcache import leases, pypi_cutoff
from sweflow.envcache.buildsteps import (
    BUILD_ENV,
    COMMIT_SETUP_EDITS,
    EXCLUDE_INSTALL_FILES,
    HARNESS_TOOLS,
    SEED_TEMP_NAMES,
    SEEDED_TEMP_NAMES,
    SEEDED_TEMP_NAMES_AT,
    see_venv_from_base,
    setup_patch_script,
)
from sweflow.envcache.freshness import build_record, stale
from sweflow.envcache.images.importer import PREFIXES as IMAGE_PREFIXES
from sweflow.envcache.images.importer import (
    find_image,
    import_base,
    import_image,
    unreachable_image,
)
from sweflow.envcache.images.sources import ImageImportError
from sweflow.envcache.instance_spec import WORKDIR, instance_sandbox_spec
from sweflow.envcache.pipsettings import host_pip_settings
from sweflow.envcache.records import Layer, LayerKind, Manifest
from sweflow.envcache.repos import (
    FIXED_DATE,
    RepoSource,
    commit_patch,
    export_commit,
    scm_version,
    unbuildable_rows,
)
from sweflow.envcache.requirements import spec_requirements
from sweflow.envcache.runtimes import Runtime, find_runtime
from sweflow.envcache.store import LayerStore
from sweflow.envcache.storefiles import flocked
from sweflow.envcache.submodules import export_submodules
from sweflow.envcache.validate import Prepared
from sweflow.errors import SweflowError
from sweflow.files import write_atomic
from sweflow.formats import grading_of
from sweflow.harness import internet
from sweflow.harness.evalscript import make_eval_script
from sweflow.harness.specs import EnvSpec, SpecError, SpecTable
from sweflow.instances import Instance
from sweflow.paths import rootfs_cache
from sweflow.progress import Progress, no_progress
from sweflow.sandbox import Bind, Limits, SandboxSpec, open_sandbox
from sweflow.sandbox.leases import HeldLeases, hold_leases
from sweflow.sandbox.rootfs import clean_apt, resolve_base
from sweflow.sandbox.spec import DEFAULT_PATH
from sweflow.sandbox.tracking import interruptible_map

VENV = "/opt/sweflow/venv"
VENV_ACTIVATE = f". {VENV}/bin/activate"
# The SWE-bench harness images' environment (conda at /opt/miniconda3, env "testbed").
CONDA_ENV = "opt/miniconda3/envs/testbed"
CONDA_ACTIVATE = "source /opt/miniconda3/bin/activate\nconda activate testbed"
ENV_RECIPE = 5  # part of every environment layer's key: bump it when _env_layer's script changes
# Recorded in every manifest: bump it when what the builder makes of a spec changes (the env
# recipe above, or the instance layer: the checkout's mtimes, its submodules), so that stored
# instances are built again (``freshness``). Instance recipe 3: setuptools_scm's version in the
# manifest's env, for the eval script's re-install too.
RECIPE = f"env{ENV_RECIPE}.instance3"
WHEELHOUSE = "/wheelhouse"


def activation_of(layers: Sequence[Layer]) -> str:
    """How an eval script enters an image's environment: the harness's conda env, sweflow's
    venv, or nothing (the image's PATH as it is), by what its layers hold."""
    paths = [layer.path for layer in layers if layer.path is not None]
    if any((path / CONDA_ENV).is_dir() for path in paths):
        return CONDA_ACTIVATE
    if any((path / VENV.lstrip("/") / "bin" / "activate").is_file() for path in paths):
        return VENV_ACTIVATE
    return ""


class BuildError(SweflowError):
    """One layer could not be built; the message names the instance or environment and log."""


class BuildOptions(BaseModel):
    """How environments are built (not what: that is the spec table)."""

    model_config = ConfigDict(extra="forbid")

    store: Path
    repo_mirror: Path | None = None
    repo_path: Path | None = None
    repo_url: str | None = None
    base: str | None = None
    images: str | None = None  # rows with an `image`: a folder of image archives, registry:HOST
    wheelhouse: Path | None = None
    network: bool = True
    max_workers: int = 2
    timeout_s: float = 3600.0


@dataclass
class BuildResult:
    instance_id: str
    status: Literal["built", "cached", "error"]
    seconds: float = 0.0
    error: str = ""
    log_path: str = ""
    layers: list[str] = field(default_factory=list)  # the manifest's digests, lowest first


def _digest(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


class EnvBuilder:
    """Builds and finds the layers of instances in one store."""

    def __init__(
        self,
        specs: SpecTable,
        options: BuildOptions,
        progress: Progress = no_progress,
    ) -> None:
        self.specs = specs
        self.options = options
        self.store = LayerStore(options.store)
        self.progress = progress
        self._key_locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self.logs = options.store / "logs"
        self.refs = options.store / "refs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.refs.mkdir(parents=True, exist_ok=True)

    # -- public ------------------------------------------------------------------------------
    def build(self, instances: Sequence[Instance]) -> list[BuildResult]:
        """Build what is missing; returns one result per instance, in order.

        Every repository still needed is located first (no cloning): an instance whose
        repository is missing gets an error naming it and where it was looked for, and when no
        repository can be found nothing is built at all.
        """
        failed = self.unbuildable(instances)
        buildable = [i for i in instances if i.instance_id not in failed]
        built = iter(interruptible_map(self.build_one, buildable, self.options.max_workers))
        return [failed.get(i.instance_id) or next(built) for i in instances]

    def pack(self, instance_ids: Sequence[str], fmt: Literal["squashfs", "erofs"]) -> int:
        """Pack the built instances' own layers into images (mounted read-only from then on).

        The shared base stays a directory: it lives outside the store. Returns how many layers
        were packed; call it when no sandbox is running on these layers.
        """
        digests = {
            layer.digest
            for iid in instance_ids
            if (manifest := self.store.read_manifest(iid)) is not None
            for layer in manifest.layers
            if layer.kind != "base"
        }
        for digest in sorted(digests):
            self.store.pack(digest, fmt, keep_dir=False)
        return len(digests)

    def sandbox_spec(self, instance_id: str, **overrides: object) -> SandboxSpec:
        return instance_sandbox_spec(self.store, instance_id, **overrides)

    def prepare_validation(self, instance: Instance, built: BuildResult) -> Prepared:
        """What validating an instance needs: its sandbox and eval script, or its build error."""
        if built.status == "error":
            return Prepared(instance, None, "", build_error=built.error, build_log=built.log_path)
        sandbox = self.sandbox_spec(instance.instance_id)
        if instance.eval_script:  # the row's own (swebench 5 rows carry one): no spec needed
            return Prepared(instance, sandbox, instance.eval_script)
        if (own := grading_of(instance)) is not None:  # SWE-smith's, R2E-Gym's own runs
            script = own.eval_script(instance, None, self.activation(instance.instance_id))
            reader = partial(own.statuses, instance)
            return Prepared(instance, sandbox, script, log_parser=own.log_parser, statuses=reader)
        spec = self.specs.get(instance.repo, instance.version)
        script = make_eval_script(instance, spec, self.activation(instance.instance_id))
        return Prepared(instance, sandbox, script, log_parser=spec.log_parser)

    def log_path(self, instance_id: str) -> Path:
        return self.logs / f"{instance_id}.log"

    # -- one instance -----------------------------------------------------------------------
    def build_one(self, instance: Instance) -> BuildResult:
        """Build one instance's layers unless the store has them as its row and spec would
        build them (one failure never raises). Either way the instance is leased, so that a
        gc keeps it for whoever uses it next (``LEASE_GRACE_S``)."""
        result, held = self.build_held(instance)
        if held is not None:
            held.release()
        return result

    def build_held(self, instance: Instance) -> tuple[BuildResult, HeldLeases | None]:
        """:meth:`build_one`, returning with the instance's lease held (a shared flock, as an
        open sandbox holds it; None with an error): a gc keeps the instance, whatever its
        grace, until the caller releases it, having graded or validated it. It is held from
        the moment the manifest exists, which the build writes under the same ``store.hold()``
        as its layers, so no gc runs between a build's first layer and its user's sandbox.

        One build of an instance at a time on a store, in any process: a second waits for the
        first and takes what it built (``cached``)."""
        iid = instance.instance_id
        log = self.log_path(iid)
        start = time.monotonic()
        try:
            with self._locked(f"instance-{iid}"):
                with self.store.hold():
                    manifest = self.store.read_manifest(iid)
                    why = self._why_build(instance, manifest)
                    if manifest is not None and why is None:
                        held = hold_leases([leases.take(self.store, manifest)])
                if manifest is None or why is not None:
                    self.progress(f"building: {iid}")
                    log.write_text(
                        f"building {iid} ({instance.repo} {instance.version} at "
                        f"{instance.base_commit}): {why}\n"
                    )
                    with self.store.hold():  # no store gc between the commits and the lease
                        manifest = self._build_layers(instance, log)
                        held = hold_leases([leases.take(self.store, manifest)])
        except Exception as exc:  # one instance's failure never stops the others
            message = str(exc) if isinstance(exc, SweflowError) else f"{type(exc).__name__}: {exc}"
            with open(log, "a") as f:
                f.write(f"\nBUILD ERROR: {message}\n")
            self.progress(f"error: {iid}")
            error = BuildResult(iid, "error", round(time.monotonic() - start, 3), message, str(log))
            return error, None
        status: Literal["built", "cached"] = "cached" if why is None else "built"
        seconds = 0.0 if why is None else round(time.monotonic() - start, 3)
        self.progress(f"{status}: {iid}")
        layers = [layer.digest for layer in manifest.layers]
        return BuildResult(iid, status, seconds, log_path=str(log), layers=layers), held

    def stored_layers(self, instance: Instance) -> list[str] | None:
        """The layer digests of the stored instance when a build would take it as it is; None
        when a build would make it (absent, or from other inputs: row, spec, base, recipe)."""
        manifest = self.store.read_manifest(instance.instance_id)
        if manifest is None or self._why_build(instance, manifest) is not None:
            return None
        return [layer.digest for layer in manifest.layers]

    def _why_build(self, instance: Instance, manifest: Manifest | None) -> str | None:
        """Why the instance must be built: not stored, or stored from other inputs than its row
        and spec give now (``freshness``); None when the stored one is what a build would make."""
        if manifest is None or not all(self.store.has_layer(lay.digest) for lay in manifest.layers):
            return "not in the store"
        try:
            image_row = bool(self.options.images and instance.image)
            spec = None if image_row else self.specs.get(instance.repo, instance.version or "")
        except SpecError as exc:  # the build says so too, as its error
            return str(exc)
        return (spec and self._base_changed(spec, manifest)) or stale(
            manifest, build_record(instance, spec, RECIPE)
        )

    def _base_changed(self, spec: EnvSpec, manifest: Manifest) -> str | None:
        """Why the stored instance stands on another base than a build would use now: another
        image base named, or a rootfs that is not the one its name gives now (rebuilt with other
        packages, another directory); None when it is the same. An image base is compared by
        name, so that a cached instance needs no registry."""
        try:
            base = find_runtime(spec.python, self.options.base).base
            if base.startswith(IMAGE_PREFIXES):
                then = manifest.meta.get("base", base)
                return None if then == base else f"built on base {then}, not {base}"
            now = self.store.import_dir(resolve_base(base, rootfs_cache()), "base").digest
        except SweflowError as exc:  # the build says so too, as its error
            return str(exc)
        then = manifest.layers[0].digest if manifest.layers else ""
        return None if then == now else f"built on another base ({then[:12]} -> {now[:12]})"

    def _build_layers(self, instance: Instance, log: Path) -> Manifest:
        iid = instance.instance_id
        if self.options.images and instance.image:
            return self._image_instance(instance, log)
        spec = self.specs.get(instance.repo, instance.version)
        layers, env, runtime = self._environment(spec, instance)
        git_dir = self._repo(instance)
        version = scm_version(git_dir, instance.base_commit)
        if version:  # the install and the eval's re-install alike (setuptools_scm's override)
            env = {**env, "SETUPTOOLS_SCM_PRETEND_VERSION": version}
        instance_layer = self._instance_layer(instance, spec, git_dir, layers, env, log)
        return self.store.write_manifest(
            iid,
            [*layers, instance_layer],
            {
                "workdir": WORKDIR,
                "env": env,
                "python": runtime.python,
                "base": runtime.base,
                **build_record(instance, spec, RECIPE),
            },
        )

    def _image_instance(self, instance: Instance, log: Path) -> Manifest:
        """The row's own image (an official SWE-bench, SWE-Gym or SWE-smith image) as its layers,
        unchanged: the same bits the docker harness runs, nothing built on top."""
        try:
            name = find_image(self.options.images or "", instance.image or "")
            imported = import_image(self.store, name)
        except ImageImportError as exc:
            raise BuildError(unreachable_image(instance, self.options.images or "", exc)) from exc
        with open(log, "a") as f:
            f.write(
                f"image {instance.image}: {len(imported.layers)} layers from {name} "
                f"({imported.extracted} extracted, the others already in the store)\n"
            )
        workdir = imported.workdir if imported.workdir != "/" else WORKDIR
        layers = list(imported.layers)
        if instance.setup_patch:  # an image of the repository, not of the instance (SWE-smith)
            layers.append(self._setup_patch_layer(instance, layers, imported.env, workdir, log))
        return self.store.write_manifest(
            instance.instance_id,
            layers,
            {
                "workdir": workdir,
                "env": imported.env,
                "activate": activation_of(imported.layers),
                **build_record(instance, None),
            },
        )

    def _setup_patch_layer(
        self, instance: Instance, layers, env: dict[str, str], workdir: str, log: Path
    ) -> Layer:
        """The instance's setup patch committed in the image's checkout, by the image's own git,
        as ``commit_patch`` commits it on a checkout sweflow exports (SWE-smith's images hold
        the repository; its harness checks out the instance's branch, which this commit is)."""
        patch = instance.setup_patch
        with self.store.fresh_upper() as upper:
            with self._sandbox(layers, upper, {**env, **FIXED_DATE}) as sandbox:
                sandbox.write(
                    "/tmp/sweflow-setup.diff", patch if patch.endswith("\n") else patch + "\n"
                )
                step = f"{instance.instance_id}: setup patch"
                self._run(sandbox, setup_patch_script(workdir), log, step)
            return self._commit(upper, "instance")

    def activation(self, instance_id: str) -> str:
        """The line that activates an instance's environment in an eval script: the venv of a
        built one, or what its image's layout says (the harness images' conda env)."""
        manifest = self.store.read_manifest(instance_id)
        return manifest.meta.get("activate", VENV_ACTIVATE) if manifest else VENV_ACTIVATE

    def _environment(self, spec: EnvSpec, instance: Instance):
        runtime = find_runtime(spec.python, self.options.base)
        image = import_base(self.store, runtime.base)  # docker-archive:, oci:, registry: bases
        if image is not None:
            layers = list(image.layers)
        else:
            layers = [self.store.import_dir(resolve_base(runtime.base, rootfs_cache()), "base")]
        if runtime.host_prefix is not None:
            layers.append(self._python_layer(runtime.host_prefix))
        if spec.emulated_hosts:
            layers.append(self._internet_layer(spec, runtime, layers))
        requirements = spec_requirements(spec, instance, self._repo(instance))
        key = _digest(
            [layer.digest for layer in layers],
            spec.env_digest(),
            requirements,
            bool(self.options.wheelhouse),
            ENV_RECIPE,
        )
        image_env = image.env if image is not None else {}  # an image's own settings first
        env = {
            **image_env,
            "PATH": f"{VENV}/bin:{image_env.get('PATH', DEFAULT_PATH)}",
            "VIRTUAL_ENV": VENV,
            **spec.env_vars,
        }
        layers.append(
            self._once(
                f"env-{key}",
                lambda log: self._env_layer(spec, runtime, layers, env, requirements, log),
            )
        )
        return layers, env, runtime

    @contextmanager
    def _locked(self, key: str) -> Iterator[None]:
        """One holder of ``key`` at a time: threads here, processes on this store."""
        with self._locks_guard:
            lock = self._key_locks.setdefault(key, threading.Lock())
        with lock, flocked(self.refs / f"{key}.lock"):
            yield

    def _once(self, ref: str, make: Callable[[Path], object]):
        """The layer recorded under ``ref``, made once even when many instances need it."""
        with self._locked(ref):
            ref_file = self.refs / ref
            if ref_file.exists():
                layer = self.store.get_layer(ref_file.read_text().strip())
                if layer is not None:
                    return layer
            log = self.logs / f"{ref}.log"
            layer = make(log)
            write_atomic(ref_file, layer.digest, staged=self.store.staged())
            return layer

    def _python_layer(self, prefix: Path):
        """A host interpreter, copied to the same absolute path inside a layer."""

        def make(log: Path):
            with self.store.fresh_upper() as upper:
                target = upper / str(prefix).lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copytree(
                    prefix, target, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
                )
                log.write_text(f"copied {prefix}\n")
                return self.store.commit(upper, "python")

        return self._once(f"python-{_digest(str(prefix), prefix.stat().st_mtime)}", make)

    def _env_layer(self, spec, runtime: Runtime, layers, env, requirements, log: Path):
        packages = [] if spec.packages_file or not spec.packages else shlex.split(spec.packages)
        script = [
            "set -euxo pipefail",
            f"{runtime.python} -m venv {VENV}",
            f". {VENV}/bin/activate",
        ]
        script += [f"export {k}={shlex.quote(v)}" for k, v in spec.env_vars.items()]
        script.append(see_venv_from_base(runtime.python))
        script += list(spec.pre_install)
        # The pip, setuptools and wheel of the harness's conda environments, not the suite's
        # (bullseye's venv pip 20.3 cannot install an editable project with a new setuptools).
        # The flag, not the sandbox's PIP_NO_CACHE_DIR=1: the pip of a Python 3.6 venv (18.1)
        # reads that variable as a cache path and fails (fixed in pip 19).
        tools = " ".join(map(shlex.quote, HARNESS_TOOLS))
        script.append(f"env -u PIP_NO_CACHE_DIR python -m pip install --no-cache-dir -U {tools}")
        if requirements is not None:
            script.append("cat /tmp/sweflow-requirements.txt")
            script.append("python -m pip install -r /tmp/sweflow-requirements.txt")
        # A package list is what the harness's `conda create` installs with the interpreter; its
        # pip_packages come after, in a pip step of their own (astropy 1.3's MarkupSafe==1.0 pin
        # builds only with the setuptools==38.2.4 its list installs first).
        for step in (packages, spec.pip_packages):
            if step:
                script.append("python -m pip install " + " ".join(map(shlex.quote, step)))
        with self.store.fresh_upper() as upper:
            with self._sandbox(layers, upper, env, spec.pypi_cutoff) as sandbox:
                if requirements is not None:
                    sandbox.write("/tmp/sweflow-requirements.txt", requirements)
                self._run(sandbox, "\n".join(script), log, "environment")
            return self._commit(upper, "env")

    def _internet_layer(self, spec: EnvSpec, runtime: Runtime, layers):
        """The emulated internet of the spec's test sandboxes (``sweflow.harness.internet``):
        its own venv, so the suite's environment stays the spec's alone; one per interpreter."""
        hosts = spec.emulated_hosts
        recipe = internet.recipe(runtime.python, hosts)
        key = _digest([layer.digest for layer in layers], recipe, spec.pypi_cutoff)

        def make(log: Path):
            with self.store.fresh_upper() as upper:
                env = {"PATH": DEFAULT_PATH}
                with self._sandbox(layers, upper, env, spec.pypi_cutoff) as sandbox:
                    for path, data in internet.layer_files(hosts).items():
                        sandbox.write(path, data)
                    script = internet.build_script(runtime.python, hosts)
                    self._run(sandbox, script, log, "emulated internet")
                return self._commit(upper, "env")

        return self._once(f"internet-{key}", make)

    def _instance_layer(
        self, instance: Instance, spec: EnvSpec, git_dir: Path, layers, env, log: Path
    ):
        with self.store.fresh_upper() as upper:
            testbed = upper / WORKDIR.lstrip("/")
            export_commit(git_dir, instance.base_commit, testbed)
            if instance.setup_patch:
                commit_patch(
                    testbed, instance.setup_patch, "setup patch", label=instance.instance_id
                )
            _, empty = export_submodules(
                self._repo_source(), instance.repo, git_dir, instance.base_commit, testbed
            )
            if empty:  # as the harness's clone leaves them; an install that needs one fails next
                with open(log, "a") as f:
                    f.writelines(f"submodule left empty: {why}\n" for why in empty)
            if spec.install or spec.setup_repo:
                with self._sandbox(layers, upper, env, spec.pypi_cutoff) as sandbox:
                    sandbox.write(SEEDED_TEMP_NAMES_AT, SEEDED_TEMP_NAMES)
                    # a failure inside a command's `a && b` list stops the step too (set -e
                    # ignores it there, and in a group ending with it)
                    commands = [*spec.setup_repo, spec.install]
                    own = [f"{{ {command}\n}} || exit $?" for command in commands]
                    steps = [SEED_TEMP_NAMES, *own, COMMIT_SETUP_EDITS]
                    install = "set -euxo pipefail\n" + f"cd {WORKDIR}\n" + "\n".join(steps)
                    self._run(sandbox, f"{install}\n{EXCLUDE_INSTALL_FILES}", log, "install")
            else:
                with open(log, "a") as f:
                    f.write("no install command: the repository is used as checked out\n")
            return self._commit(upper, "instance")

    def _commit(self, upper: Path, kind: LayerKind) -> Layer:
        """Commit a build step's upper less apt's caches (``clean_apt``): the specs' ``apt-get
        install`` steps left 718 MB of them in the 27 environments of Verified's store."""
        clean_apt(upper)
        return self.store.commit(upper, kind)

    def unbuildable(self, instances: Sequence[Instance]) -> dict[str, BuildResult]:
        """The instances still to build that cannot be, their repository or commit missing
        (``repos.unbuildable_rows``), as error results naming it (the others build); a
        RepoError when none of them can be built."""
        needed = [
            i
            for i in instances
            if not (self.options.images and i.image)
            and self._why_build(i, self.store.read_manifest(i.instance_id)) is not None
        ]
        problems = unbuildable_rows(self._repo_source(), needed)
        return {iid: BuildResult(iid, "error", error=why) for iid, why in problems.items()}

    # -- helpers ----------------------------------------------------------------------------
    def _repo_source(self) -> RepoSource:
        o = self.options
        return RepoSource(mirror=o.repo_mirror, local=o.repo_path, url=o.repo_url)

    def _repo(self, instance: Instance) -> Path:
        commits = [c for c in (instance.base_commit, instance.environment_setup_commit) if c]
        return self._repo_source().resolve(instance.repo, commits=commits)

    def _sandbox(self, layers, upper: Path, env: dict[str, str], cutoff: date | None = None):
        """A build sandbox: offline on the wheelhouse, or networked with the host's pip settings
        (pip resolving as of ``cutoff`` through a loopback index when the spec sets one)."""
        o = self.options
        binds, extra_env = [], {}
        if o.wheelhouse is not None:
            binds.append(Bind(source=o.wheelhouse, target=WHEELHOUSE))
            extra_env = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": WHEELHOUSE}
        elif o.network:
            binds, extra_env = host_pip_settings()
            if cutoff is not None:
                extra_env.pop("PIP_EXTRA_INDEX_URL", None)  # it would offer newer files
                extra_env.update(pypi_cutoff.pip_env(cutoff))
        spec = SandboxSpec(
            layers=[layer.path for layer in layers],
            workdir="/",
            env={**env, **extra_env, **BUILD_ENV},
            network=o.network and o.wheelhouse is None,
            upper="disk",
            upper_dir=upper,
            binds=binds,
            limits=Limits(wall_time_s=o.timeout_s, output_bytes=8 << 20),
        )
        return open_sandbox(spec)

    def _run(self, sandbox, script: str, log: Path, step: str) -> None:
        sandbox.write("/tmp/sweflow-step.sh", script + "\n")
        result = sandbox.exec("bash /tmp/sweflow-step.sh 2>&1", timeout=self.options.timeout_s)
        with open(log, "a") as f:
            f.write(f"===== {step} =====\n{result.output}\n===== exit {result.exit_code} =====\n")
        if not result.ok:
            why = "timed out" if result.timed_out else f"exited {result.exit_code}"
            raise BuildError(f"{step} step {why}; log: {log}")
