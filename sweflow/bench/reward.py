"""Reward benchmark: the same instances and patches graded four ways, in one run.

- ``local`` / ``docker``: ``Grader.reward`` wall time (fresh sandbox, harness apply chain, eval
  script, swebench grading, close), after one untimed warm-up call per instance (page cache;
  for docker, the image of the instance's layers); ``local_guarded`` is local with the tamper
  guard (effect check, its plugin in the run, the FAIL_TO_PASS tests again without pytest, the
  judging), each patch graded both ways in turn, and ``guard_overhead_s`` the difference of
  their p50s;
- ``harness``: swebench 5.0.2's ``run_evaluation`` on images of the same layers, one instance at a
  time; an instance's time is its run_instance.log from first to last line (container created to
  container removed), so the harness's ~4 s process start is left out in its favour;
- ``bare``: no sandbox at all (HostChroot): the same layers mounted once with overlayfs on the
  host, and per sample a reset, ``git apply`` of the patch and the same eval script (test_patch
  apply, the spec's test command, reset) run by ``chroot`` + bash with the same environment, so
  interpreter, venv and checkout are the same bits. ``bare_test_cmd`` is the test command alone
  on the checkout with the patch and the test patch applied.

``local_overhead_pct`` is local over bare; the ``*_speedup`` keys are harness time over ours.
"""

from __future__ import annotations

import contextlib
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from sweflow.envcache.dataset import Dataset
from sweflow.grading.predictions import Prediction
from sweflow.grading.reward import Grader
from sweflow.grading.variants import variant_predictions
from sweflow.harness.evalscript import patch_files
from sweflow.harness.specs import EnvSpec, SpecTable, test_command
from sweflow.instances import Instance
from sweflow.progress import Progress, no_progress

PATCH_KINDS = ["gold", "revert_hunk", "other_bug"]  # each runs the whole test suite


def _p50(samples: list[float]) -> float | None:
    return round(statistics.median(samples), 3) if samples else None


def _time_graders(
    graders: dict[str, Grader], by_id, preds: list[Prediction], reps: int
) -> dict[str, list[float]]:
    """Each patch graded by each grader in turn, after an untimed warm-up per instance: a
    machine's drift weighs on every grader alike."""
    for instance_id in dict.fromkeys(p.instance_id for p in preds):
        for grader in graders.values():
            grader.reward(by_id[instance_id], by_id[instance_id].patch)
    samples: dict[str, list[float]] = {name: [] for name in graders}
    for _ in range(reps):
        for p in preds:
            for name, grader in graders.items():
                samples[name].append(grader.reward(by_id[p.instance_id], p.model_patch).duration_s)
    return samples


class HostChroot:
    """An instance's layers on the host without a sandbox (the ``bare`` baseline): one overlayfs
    mount of the same layers, the host's /dev and /proc bound in, and commands run by ``chroot``
    with the sandbox's environment, so the interpreter, venv and checkout are the very same
    bits, and no namespace, cgroup, init or shell protocol is involved. Needs root."""

    def __init__(
        self, specs: SpecTable, store: Path, instance: Instance, eval_script: str, root: Path
    ) -> None:
        from sweflow.envcache.builder import instance_sandbox_spec
        from sweflow.envcache.store import LayerStore

        self.instance = instance
        self.spec: EnvSpec = specs.get(instance.repo, instance.version or "")
        sandbox_spec = instance_sandbox_spec(LayerStore(store), instance.instance_id)
        self.env = sandbox_spec.shell_env()
        self.root = root / "merged"
        upper, work = root / "upper", root / "work"
        for d in (self.root, upper, work):
            d.mkdir()
        lower = ":".join(str(p) for p in reversed(sandbox_spec.layers))
        self.mounts = [self.root, self.root / "dev", self.root / "proc"]
        options = f"lowerdir={lower},upperdir={upper},workdir={work}"
        subprocess.run(
            ["mount", "-t", "overlay", "overlay", "-o", options, str(self.root)], check=True
        )
        subprocess.run(["mount", "--rbind", "/dev", str(self.root / "dev")], check=True)
        subprocess.run(["mount", "-t", "proc", "proc", str(self.root / "proc")], check=True)
        (self.root / "eval.sh").write_text(eval_script)

    def close(self) -> None:
        for mount in reversed(self.mounts):
            subprocess.run(["umount", "-R", "-l", str(mount)], check=False)

    def _bash(self, script: str) -> float:
        argv = [
            "chroot",
            str(self.root),
            "/usr/bin/env",
            "-i",
            *(f"{k}={v}" for k, v in self.env.items()),
            "/bin/bash",
            "-c",
            script,
        ]
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        return time.perf_counter() - start

    def _reset_with(self, *patches: str) -> None:
        for n, patch in enumerate(patches):
            (self.root / f"tmp/bench-{n}.diff").write_text(patch)
        applies = "".join(f" && git apply /tmp/bench-{n}.diff" for n in range(len(patches)))
        self._bash(f"cd /testbed && git checkout -q -- . && git clean -fdq{applies}")

    def time_eval(self, patch: str) -> float:
        """Apply ``patch`` and run the eval script: the work of a reward, with no sandbox."""
        self._reset_with()
        (self.root / "tmp/patch.diff").write_text(patch)
        # the script's status is the tests' (failing ones included): only a failed apply is fatal
        return self._bash("cd /testbed && git apply /tmp/patch.diff && { bash /eval.sh; true; }")

    def time_commands(self, patch: str, commands: list[str]) -> float:
        """An agent's shell commands, one after the other, on the checkout with ``patch``."""
        self._reset_with(patch)
        return sum(self._bash(_quietly(command)) for command in commands)

    def time_test_cmd(self, patch: str) -> float:
        """The spec's test command alone, on the checkout with the patch and test patch."""
        self._reset_with(patch, self.instance.test_patch)
        command = test_command(self.spec, patch_files(self.instance.test_patch))
        return self._bash(_quietly(command))


def _quietly(command: str) -> str:
    """``command`` in /testbed, its output and status dropped. The parenthesis closes on a line
    of its own: a command ending in a here-document (the teacher's reproduction run) needs its
    terminator alone on the last line."""
    return f"cd /testbed && ({command}\n) >/dev/null 2>&1 || true"


def _bare(grader, by_id, preds, reps, progress) -> tuple[list[float], list[float]]:
    evals, test_cmds = [], []
    for instance_id in dict.fromkeys(p.instance_id for p in preds):
        with tempfile.TemporaryDirectory(prefix="sweflow-bare-") as tmp:
            instance = by_id[instance_id]
            script = grader.eval_script(instance)
            host = HostChroot(grader.specs, grader.store.root, instance, script, Path(tmp))
            try:
                mine = [p for p in preds if p.instance_id == instance_id]
                host.time_eval(mine[0].model_patch or "")  # warm-up
                for _ in range(reps):
                    evals += [host.time_eval(p.model_patch or "") for p in mine]
                    test_cmds += [host.time_test_cmd(p.model_patch or "") for p in mine]
            finally:
                host.close()
        progress(f"bare: {instance_id} done")
    return evals, test_cmds


def _harness(instances, grader, preds_by_kind, root: Path, progress) -> list[float]:
    import docker

    from sweflow.grading.crosscheck import harness_dataset, instance_seconds, run_harness
    from sweflow.sandbox.docker.daemon import docker_daemon

    instances = [
        i for i in instances if any(p.instance_id == i.instance_id for p in preds_by_kind["gold"])
    ]
    with docker_daemon() as host:
        client = docker.DockerClient(base_url=host)
        dataset = harness_dataset(client, grader, instances, root / "harness-dataset.jsonl")
        samples = []
        for kind, preds in preds_by_kind.items():
            run = run_harness(
                dataset, preds, f"bench-{kind}", root, docker_host=host, max_workers=1
            )
            progress(f"harness: {kind} exit {run.returncode} in {run.seconds:.0f} s")
            samples += [s for p in preds if (s := instance_seconds(root, f"bench-{kind}", p))]
    return samples


def run(
    data: Dataset,
    store: Path,
    *,
    wheelhouse: Path | None = None,
    quick: bool = False,
    limit: int = 0,
    docker: bool = True,
    harness: bool = True,
    progress: Progress = no_progress,
) -> dict:
    """Build what is missing in ``store``, then time local, docker, the harness and bare on the
    same patches."""
    built = data.builder(store, wheelhouse=wheelhouse).build(data.rows)
    failed = [r.instance_id for r in built if r.status == "error"]
    instances = data.sample(2 if quick else limit, exclude=set(failed))
    kinds = ["gold"] if quick else PATCH_KINDS
    made = variant_predictions(store, instances, kinds)
    preds_by_kind = {kind: preds for kind, preds in made.items() if preds}  # kinds that fit
    preds = [p for kind_preds in preds_by_kind.values() for p in kind_preds]
    by_id = {i.instance_id: i for i in instances}
    reps = 1 if quick else 2
    report: dict = {
        "instances": len(instances),
        "patches": len(preds),
        "reps": reps,
        "build_errors": failed,
    }
    local = Grader(store, data.specs)
    guarded = Grader(store, data.specs, tamper_guard=True)
    progress("local, without and with the tamper guard: grading")
    samples = _time_graders({"local": local, "local_guarded": guarded}, by_id, preds, reps)
    progress("bare: the same layers by chroot, no sandbox")
    samples["bare_tests"], samples["bare_test_cmd"] = _bare(local, by_id, preds, reps, progress)
    with contextlib.ExitStack() as stack:
        if docker or harness:
            from sweflow.sandbox.docker.daemon import docker_daemon

            stack.enter_context(docker_daemon())
        if docker:
            progress("docker: grading")
            docker_grader = Grader(store, data.specs, backend="docker")
            samples |= _time_graders({"docker": docker_grader}, by_id, preds, reps)
        if harness:
            progress("harness: swebench run_evaluation, one instance at a time")
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sweflow-h-")))
            samples["harness"] = _harness(data.rows, local, preds_by_kind, tmp, progress)
    for name in ("local", "local_guarded", "docker", "harness", "bare_tests", "bare_test_cmd"):
        report[f"{name}_p50_s"] = _p50(samples.get(name, []))
        report[f"{name}_samples"] = len(samples.get(name, []))
    bare, loc = report["bare_tests_p50_s"], report["local_p50_s"]
    if loc and (guard := report["local_guarded_p50_s"]):
        report["guard_overhead_s"] = round(guard - loc, 3)
        report["guard_overhead_pct"] = round((guard - loc) / loc * 100, 2)
    report["local_overhead_pct"] = round((loc - bare) / bare * 100, 2) if bare and loc else None
    cmd = report["bare_test_cmd_p50_s"]
    report["local_overhead_vs_test_cmd_pct"] = round((loc - cmd) / cmd * 100, 2) if cmd else None
    for name in ("local", "docker"):
        mine, theirs = report[f"{name}_p50_s"], report["harness_p50_s"]
        report[f"{name}_vs_harness_speedup"] = round(theirs / mine, 2) if mine and theirs else None
    return report
