"""Environment preparation benchmark: sweflow's layer cache vs untar and docker, in one run.

For the same built instances: time from cache to "ready to run tests" (a sandbox open whose
shell answers in /testbed) for sweflow; for the SWE-MiniSandbox method (untar the venv and repo
tarballs into a fresh directory per rollout, reimplemented here as the baseline); and for
starting a docker container from an image holding the same layers. Bytes on disk per instance
for each (sweflow's: each file once, as the store's file pool keeps them). And the time of a
no-op re-build (every instance cached).

The file pool must not slow a sandbox down: the same layers, copied whole with no file shared,
are opened in turn with the pooled ones (``prep_unpooled_p50_ms``, the ratio in
``pool_ready_ratio``).

With the e2b SDK installed, the e2b backend's ways of carrying an environment to a cloud, through
sweflow's endpoint on this machine (a cloud adds its network round trip and its own template
builder): ``template`` (a template built once per layer stack, its first open timed apart),
``upload`` (the layers above the base uploaded and applied at every open) and ``layers`` (the
layer directories themselves, which only sweflow's endpoint can open).
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sweflow.bench import DATA, BenchError
from sweflow.envcache.builder import EnvBuilder, instance_sandbox_spec
from sweflow.envcache.cleanup import pool_layers, store_usage
from sweflow.envcache.dataset import Dataset
from sweflow.envcache.diskusage import disk_usage
from sweflow.envcache.storefiles import owned_name
from sweflow.instances import Instance
from sweflow.progress import Progress
from sweflow.sandbox import open_sandbox

READY = "cd /testbed && test -d .git"
# numpy, pandas, scipy beside the project's own needs: an environment of a typical SWE-bench size
REPRESENTATIVE_SPECS = DATA / "specs-representative.yaml"


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def _p50_ms(samples: list[float]) -> float:
    return _ms(statistics.median(samples))


def _timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _ready_time(
    builder: EnvBuilder,
    instance_id: str,
    backend: str = "local",
    layers: list[Path] | None = None,
) -> float:
    """Seconds from the layer cache to a shell in /testbed that answers (close not counted);
    ``layers``: these directories in place of the instance's own."""
    start = time.perf_counter()
    spec = instance_sandbox_spec(builder.store, instance_id)
    if layers is not None:
        spec = spec.model_copy(update={"layers": layers})
    sandbox = open_sandbox(spec, backend)
    try:
        ready = sandbox.exec(READY).ok
        elapsed = time.perf_counter() - start
    finally:
        sandbox.close()
    if not ready:
        raise BenchError(f"{instance_id}: /testbed is not ready in the {backend} sandbox")
    return elapsed


def _e2b_ready(
    builder: EnvBuilder, ids: list[str], reps: int, progress: Progress
) -> dict[str, Any]:
    """Ready times of the e2b backend's environment modes, through a local endpoint."""
    from sweflow.e2b_endpoint.launch import local_endpoint, scoped_environ
    from sweflow.sandbox.e2b.environment import (
        BASE_TEMPLATE_VAR,
        ENVIRONMENT_VAR,
        environment_for,
        layer_archive,
    )

    specs = {iid: instance_sandbox_spec(builder.store, iid) for iid in ids}
    bases = {spec.layers[0] for spec in specs.values()}
    if len(bases) != 1:
        raise BenchError(f"e2b: the instances stand on {len(bases)} bases; time them apart")
    base = bases.pop()
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="sweflow-bench-e2b-") as tmp:
        log = Path(tmp) / "endpoint.log"
        with local_endpoint(base, log, [builder.store.root, base]):
            for mode in ("template", "upload", "layers"):
                wanted = {ENVIRONMENT_VAR: mode, BASE_TEMPLATE_VAR: "base"}
                if mode == "layers":
                    wanted = {ENVIRONMENT_VAR: "template", BASE_TEMPLATE_VAR: ""}
                with scoped_environ(wanted):
                    progress(f"e2b ({mode}): first open of each instance")
                    first = [_ready_time(builder, iid, "e2b") for iid in ids]
                    progress(f"e2b ({mode}): open each instance until /testbed answers")
                    samples = [_ready_time(builder, iid, "e2b") for _ in range(reps) for iid in ids]
                    if mode != "layers":
                        carried = [
                            layer_archive(layer).stat().st_size
                            for spec in specs.values()
                            for layer in environment_for(spec).layers  # type: ignore[union-attr]
                        ]
                        figures[f"e2b_{mode}_carried_mb_per_instance"] = round(
                            sum(carried) / len(ids) / 1e6, 3
                        )
                figures[f"e2b_{mode}_first_open_p50_ms"] = _p50_ms(first)
                figures[f"e2b_{mode}_ready_p50_ms"] = _p50_ms(samples)
    figures["e2b_default_mode"] = "template"
    return figures


def _tarballs(builder: EnvBuilder, instance_id: str, out: Path) -> list[Path]:
    """The venv (env layer) and repo (instance layer) as tarballs, as SWE-MiniSandbox keeps them."""
    manifest = builder.store.read_manifest(instance_id)
    paths = builder.store.layer_paths(manifest)  # type: ignore[arg-type]
    tarballs = []
    for name, layer in (("env", paths[-2]), ("repo", paths[-1])):
        target = out / f"{instance_id}-{name}.tar"
        if not target.exists():
            with tarfile.open(target, "w") as tar:
                tar.add(layer, arcname=".")
        tarballs.append(target)
    return tarballs


def _untar_time(tarballs: list[Path], scratch: Path) -> float:
    """Seconds to untar the venv and repo into a fresh directory with tar(1), as per rollout."""
    start = time.perf_counter()
    dest = Path(tempfile.mkdtemp(dir=scratch))
    for tarball in tarballs:
        subprocess.run(["tar", "-xf", str(tarball), "-C", str(dest)], check=True)
    elapsed = time.perf_counter() - start
    if not (dest / "testbed" / ".git").is_dir():
        raise BenchError(f"untar baseline: no repo in {dest}")
    shutil.rmtree(dest)
    return elapsed


@contextmanager
def _unpooled_copies(builder: EnvBuilder, ids: list[str]) -> Iterator[dict[str, list[Path]]]:
    """Each instance's layers as ``instance_sandbox_spec`` gives them, the store's own ones
    (above the base) copied whole, so that no file is shared with another layer: the store as
    it was before the file pool, on the same filesystem."""
    store = builder.store
    scratch = store.tmp / owned_name("unpooled")
    copies: dict[Path, Path] = {}
    scratch.mkdir()
    try:
        layers = {}
        for iid in ids:
            paths = instance_sandbox_spec(store, iid).layers
            kinds = [layer.kind for layer in store.read_manifest(iid).layers]  # type: ignore[union-attr]
            for path, kind in zip(paths, kinds, strict=True):
                if kind != "base" and path not in copies:
                    copies[path] = scratch / path.name
                    subprocess.run(["cp", "-a", str(path), str(copies[path])], check=True)
            layers[iid] = [copies.get(path, path) for path in paths]
        yield layers
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _copies(instances: list[Instance], count: int) -> list[Instance]:
    """``count`` instances cycling through the real ones under new ids (for the no-op rebuild)."""
    return [
        instances[k % len(instances)].model_copy(
            update={"instance_id": f"{instances[k % len(instances)].instance_id}--copy{k}"}
        )
        for k in range(count)
    ]


def run(
    builder: EnvBuilder,
    instances: list[Instance],
    *,
    quick: bool,
    docker: bool,
    e2b: bool = False,
    progress: Progress = print,
) -> dict[str, Any]:
    reps = 3 if quick else 10
    ids = [i.instance_id for i in instances]
    progress(f"building {len(ids)} instances (cached ones are skipped)")
    start = time.perf_counter()
    failed = [r for r in builder.build(instances) if r.status == "error"]
    if failed:
        raise BenchError(f"{len(failed)} instance(s) failed to build: {failed[0].error}")
    report: dict[str, Any] = {"instances": len(ids), "quick": quick}
    report["build_s"] = round(time.perf_counter() - start, 3)
    many = _copies(instances, 10 if quick else 50)
    progress(f"no-op re-build of {len(many)} built instances")
    builder.build(many)
    report["noop_rebuild_instances"] = len(many)
    report["noop_rebuild_s"] = round(_timed(lambda: builder.build(many)), 3)
    progress("linking the layers' files to the store's file pool (for a store built before it)")
    manifests = [builder.store.read_manifest(iid) for iid in ids]
    pool_layers(builder.store, only={lay.digest for m in manifests if m for lay in m.layers})
    progress("sweflow: open a sandbox on each instance until /testbed answers, in turn on the")
    progress("         pooled layers and on whole copies of them that share no file")
    samples, unpooled = [], []
    with _unpooled_copies(builder, ids) as copies:
        for _ in range(reps):
            for iid in ids:
                samples.append(_ready_time(builder, iid))
                unpooled.append(_ready_time(builder, iid, layers=copies[iid]))
    report["prep_p50_ms"] = _p50_ms(samples)
    report["prep_range_ms"] = [_ms(min(samples)), _ms(max(samples))]
    report["prep_unpooled_p50_ms"] = _p50_ms(unpooled)
    report["pool_ready_ratio"] = round(statistics.median(samples) / statistics.median(unpooled), 3)
    with tempfile.TemporaryDirectory(prefix="sweflow-untar-") as tmp:
        scratch = Path(tmp)
        tarballs = {iid: _tarballs(builder, iid, scratch) for iid in ids}
        progress("baseline: untar venv + repo tarballs per rollout")
        # as many samples as sweflow's side: this baseline is the noisy one (a 30 MB untar is
        # ruled by the page cache, warm here: the tarballs were just written)
        untar = [_untar_time(tarballs[iid], scratch) for _ in range(reps) for iid in ids]
        report["untar_baseline_p50_ms"] = _p50_ms(untar)
        report["untar_baseline_range_ms"] = [_ms(min(untar)), _ms(max(untar))]
        report["untar_page_cache"] = "warm"
        report["tarball_mb_per_instance"] = round(
            sum(t.stat().st_size for ts in tarballs.values() for t in ts) / len(ids) / 1e6, 3
        )
    usage = store_usage(builder.store)
    above_base = disk_usage(builder.store, ids, kinds={"python", "env", "instance", "image"})
    report["store_mb_per_instance"] = round(above_base.disk_bytes / len(ids) / 1e6, 3)
    report["store_mb_per_instance_as_trees"] = round(above_base.apparent_bytes / len(ids) / 1e6, 3)
    report["files_deduplicated_pct"] = round(above_base.files_deduplicated_pct or 0.0, 1)
    report["shared_base_mb"] = round(usage.external_bytes / 1e6, 3)
    report["speedup_vs_untar"] = round(report["untar_baseline_p50_ms"] / report["prep_p50_ms"], 1)
    report["store_vs_tarball_pct"] = round(
        100 * report["store_mb_per_instance"] / report["tarball_mb_per_instance"], 1
    )
    if docker:
        from sweflow.sandbox.docker import docker_client, image_tag
        from sweflow.sandbox.docker.daemon import docker_daemon

        with docker_daemon():
            progress("baseline: docker container from an image of the same layers")
            docker_samples = [
                _ready_time(builder, iid, "docker") for _ in range(reps) for iid in ids
            ]
            report["docker_baseline_p50_ms"] = _p50_ms(docker_samples)
            client = docker_client()
            sizes = []
            for iid in ids:
                layers = instance_sandbox_spec(builder.store, iid).layers
                sizes.append(client.images.get(image_tag(layers)).attrs["Size"])
            report["docker_mb_per_instance"] = round(sum(sizes) / len(sizes) / 1e6, 3)
    if e2b:
        report.update(_e2b_ready(builder, ids, reps, progress))
    return report


def with_representative(
    real: dict[str, Any],
    dataset: str | Path,
    store: Path,
    instances: list[Instance],
    mirror: Path | None,
    **options: Any,
) -> dict[str, Any]:
    """``real``'s figures, with the same instances timed again (``options``: :func:`run`'s) in
    an environment grown to a typical SWE-bench size, built from the package index in a store of
    its own beside ``store``: how each method scales with the environment's size."""
    grown = Dataset.load(dataset, specs=REPRESENTATIVE_SPECS, mirror=mirror).builder(
        store.with_name(f"{store.name}-representative"), max_workers=2
    )
    return {**real, "real": real, "representative": run(grown, instances, **options)}
