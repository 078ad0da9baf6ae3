"""Reward benchmark: the same instances and patches graded four ways, in one run.

- ``local`` / ``docker``: ``Grader.reward`` wall time (fresh sandbox, harness apply chain, eval
  script, swebench grading, close), after one untimed warm-up call per instance (page cache;
  for docker, the image of the instance's layers);
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
from collections.abc import Callable
from pathlib import Path

from sweflow.grading.dataset import GradingData
from sweflow.grading.predictions import Prediction
from sweflow.grading.reward import Grader
from sweflow.grading.variants import variant_predictions
from sweflow.harness.evalscript import patch_files
from sweflow.harness.specs import EnvSpec, test_command
from sweflow.instances import Instance

Progress = Callable[[str], None]
PATCH_KINDS = ["gold", "revert_hunk", "other_bug"]  # each runs the whole test suite


def _p50(samples: list[float]) -> float | None:
    return round(statistics.median(samples), 3) if samples else None


def _time_grader(grader: Grader, by_id, preds: list[Prediction], reps: int) -> list[float]:
    for instance_id in dict.fromkeys(p.instance_id for p in preds):  # warm-up, untimed
        grader.reward(by_id[instance_id], by_id[instance_id].patch)
    samples = []
    for _ in range(reps):
        for p in preds:
            samples.append(grader.reward(by_id[p.instance_id], p.model_patch).duration_s)
    return samples


class HostChroot:
    """An instance's layers on the host without a sandbox (the ``bare`` baseline): one overlayfs
    mount of the same layers, the host's /dev and /proc bound in, and commands run by ``chroot``
    with the sandbox's environment, so the interpreter, venv and checkout are the very same
    bits, and no namespace, cgroup, init or shell protocol is involved. Needs root."""

    def __init__(self, data: GradingData, instance: Instance, eval_script: str, root: Path) -> None:
        from sweflow.envcache.builder import instance_sandbox_spec

        self.instance = instance
        self.spec: EnvSpec = data.specs.get(instance.repo, instance.version or "")
        sandbox_spec = instance_sandbox_spec(data.builder.store, instance.instance_id)
        self.env = sandbox_spec.shell_env()
        self.root = root / "merged"
        upper, work = root / "upper", root / "work"
        for d in (self.root, upper, work):
            d.mkdir()
        lower = ":".join(str(p) for p in reversed(sandbox_spec.layers))
        self.mounts = [self.root, self.root / "dev", self.root / "proc"]
        options = f"lowerdir={lower},upperdir={upper},workdir={work}"
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o", options, str(self.root)],
                       check=True)  # fmt: skip
        subprocess.run(["mount", "--rbind", "/dev", str(self.root / "dev")], check=True)
        subprocess.run(["mount", "-t", "proc", "proc", str(self.root / "proc")], check=True)
        (self.root / "eval.sh").write_text(eval_script)

    def close(self) -> None:
        for mount in reversed(self.mounts):
            subprocess.run(["umount", "-R", "-l", str(mount)], check=False)

    def _bash(self, script: str) -> float:
        argv = ["chroot", str(self.root), "/usr/bin/env", "-i",
                *(f"{k}={v}" for k, v in self.env.items()), "/bin/bash", "-c", script]  # fmt: skip
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


def _bare(data, grader, by_id, preds, reps, progress) -> tuple[list[float], list[float]]:
    evals, test_cmds = [], []
    for instance_id in dict.fromkeys(p.instance_id for p in preds):
        with tempfile.TemporaryDirectory(prefix="sweflow-bare-") as tmp:
            instance = by_id[instance_id]
            host = HostChroot(data, instance, grader.eval_script(instance), Path(tmp))
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


def _harness(data, grader, preds_by_kind, root: Path, progress) -> list[float]:
    import docker

    from sweflow.grading.crosscheck import harness_dataset, instance_seconds, run_harness
    from sweflow.sandbox.docker.daemon import docker_daemon

    instances = [i for i in data.instances if any(p.instance_id == i.instance_id
                                                  for p in preds_by_kind["gold"])]  # fmt: skip
    with docker_daemon() as host:
        client = docker.DockerClient(base_url=host)
        dataset = harness_dataset(client, grader, instances, root / "harness-dataset.jsonl")
        samples = []
        for kind, preds in preds_by_kind.items():
            run = run_harness(dataset, preds, f"bench-{kind}", root, docker_host=host,
                              max_workers=1)  # fmt: skip
            progress(f"harness: {kind} exit {run.returncode} in {run.seconds:.0f} s")
            samples += [s for p in preds if (s := instance_seconds(root, f"bench-{kind}", p))]
    return samples


def run(
    data: GradingData,
    *,
    quick: bool = False,
    limit: int = 0,
    docker: bool = True,
    harness: bool = True,
    progress: Progress = lambda line: None,
) -> dict:
    """Build what is missing, then time local, docker, the harness and bare on the same patches."""
    built = data.build()
    failed = [r.instance_id for r in built if r.status == "error"]
    instances = data.sample(2 if quick else limit, exclude=set(failed))
    kinds = ["gold"] if quick else PATCH_KINDS
    made = variant_predictions(data.store, instances, kinds)
    preds_by_kind = {kind: preds for kind, preds in made.items() if preds}  # kinds that fit
    preds = [p for kind_preds in preds_by_kind.values() for p in kind_preds]
    by_id = {i.instance_id: i for i in instances}
    reps = 1 if quick else 2
    report: dict = {"instances": len(instances), "patches": len(preds), "reps": reps,
                    "build_errors": failed}  # fmt: skip
    local = Grader(data.store, data.specs)
    progress("local: grading")
    samples = {"local": _time_grader(local, by_id, preds, reps)}
    progress("bare: the same layers by chroot, no sandbox")
    samples["bare_tests"], samples["bare_test_cmd"] = _bare(
        data, local, by_id, preds, reps, progress
    )
    with contextlib.ExitStack() as stack:
        if docker or harness:
            from sweflow.sandbox.docker.daemon import docker_daemon

            stack.enter_context(docker_daemon())
        if docker:
            progress("docker: grading")
            samples["docker"] = _time_grader(
                Grader(data.store, data.specs, backend="docker"), by_id, preds, reps
            )
        if harness:
            progress("harness: swebench run_evaluation, one instance at a time")
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sweflow-h-")))
            samples["harness"] = _harness(data, local, preds_by_kind, tmp, progress)
    for name in ("local", "docker", "harness", "bare_tests", "bare_test_cmd"):
        report[f"{name}_p50_s"] = _p50(samples.get(name, []))
        report[f"{name}_samples"] = len(samples.get(name, []))
    bare, loc = report["bare_tests_p50_s"], report["local_p50_s"]
    report["local_overhead_pct"] = round((loc - bare) / bare * 100, 2) if bare and loc else None
    cmd = report["bare_test_cmd_p50_s"]
    report["local_overhead_vs_test_cmd_pct"] = round((loc - cmd) / cmd * 100, 2) if cmd else None
    for name in ("local", "docker"):
        mine, theirs = report[f"{name}_p50_s"], report["harness_p50_s"]
        report[f"{name}_vs_harness_speedup"] = round(theirs / mine, 2) if mine and theirs else None
    return report
