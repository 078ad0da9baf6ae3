"""The policy served by vLLM for the rollouts, its weights following the trainer's.

:func:`serve_policy` starts one vLLM server for the whole run (never one per step) on the
starting policy, with what the rollouts need: the trainer's dtype (so sampler and learner compute
the same function), log-probabilities after temperature (``processed_logprobs``, what the
trainer's loss computes), the dev-mode endpoints and sweflow's worker extension
(sweflow.serving.weight_reload) for reloading weights in place. :class:`ServedPolicy` is a
generator (sweflow.training.rl.generation) over it: token ids in through ``/v1/completions``, the
sampled ids and their log-probabilities out, as many requests at once as there are episodes
(vLLM batches them and caches the shared prefixes of an episode's turns).

A refresh (:meth:`ServedPolicy.load`) makes the server read the weights the trainer wrote
(:class:`WeightFolders`: one folder per policy version, in memory when /dev/shm has room), reload
them in place and reset its prefix cache, whose entries were computed with the old weights. It
happens only between batches, with no request in flight. A refresh that fails is an
infrastructure failure (:class:`WeightSyncError`): the step fails and the last checkpoint stays
the resume point.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import sweflow
from sweflow.errors import InfrastructureError
from sweflow.ports import free_port
from sweflow.sandbox.procs import running
from sweflow.serving.vllm import ServeConfig, ServeError, vllm_server
from sweflow.serving.weight_reload import EXTENSION, METHOD
from sweflow.training.rl.backend import RLError
from sweflow.training.rl.config import RLConfig
from sweflow.training.rl.generation import BusyClock
from sweflow.training.rl.lora import save_merged

SERVED_NAME = "policy"
REQUEST_TIMEOUT_S = 900.0  # one reply of a busy CPU server
RELOAD_TIMEOUT_S = 900.0


class WeightSyncError(InfrastructureError):
    """The served policy's weights could not be refreshed; the message names the step."""


class ServedPolicy:
    """The policy as the vLLM server at ``base_url`` samples it (a generator of episodes)."""

    def __init__(self, base_url: str, temperature: float, version: int = 0) -> None:
        self.base_url, self.temperature, self.version = base_url, temperature, version
        self.clock = BusyClock()
        self.generated = 0
        self._client: Any = None  # httpx.AsyncClient, made in the event loop that uses it

    @property
    def busy_s(self) -> float:
        return self.clock.busy_s

    async def __call__(
        self, ids: list[int], max_new: int, temperature: float | None = None
    ) -> tuple[list[int], list[float]]:
        """Sampled at ``temperature`` (default: the generator's; 0: greedy)."""
        import httpx

        if self._client is None:
            self._client = httpx.AsyncClient(base_url=self.base_url, timeout=REQUEST_TIMEOUT_S)
        body = {
            "model": SERVED_NAME,
            "prompt": ids,
            "max_tokens": max_new,
            "temperature": self.temperature if temperature is None else temperature,
            "top_p": 1.0,
            "top_k": -1,
            "logprobs": 0,
            "return_token_ids": True,
            "skip_special_tokens": False,
        }
        with self.clock:
            response = await self._client.post("/completions", json=body)
        response.raise_for_status()
        choice = response.json()["choices"][0]
        tokens, logprobs = choice["token_ids"], choice["logprobs"]["token_logprobs"]
        self.generated += len(tokens)
        return list(tokens), [float(lp) for lp in logprobs]

    def load(self, folder: Path, version: int) -> None:
        """Reload the server's weights in place from ``folder`` (policy ``version``) and reset
        its prefix cache; call with no generation in flight."""
        import httpx

        root = self.base_url.removesuffix("/v1")
        try:
            with httpx.Client(base_url=root, timeout=RELOAD_TIMEOUT_S) as client:
                rpc = {"method": METHOD, "kwargs": {"path": str(folder)}}
                client.post("/collective_rpc", json=rpc).raise_for_status()
                for _ in range(10):  # refused while a request still holds cache blocks
                    reset = client.post("/reset_prefix_cache").raise_for_status()
                    if reset.json().get("success"):
                        break
                    time.sleep(0.5)
                else:
                    raise WeightSyncError("vLLM kept refusing to reset its prefix cache")
        except httpx.HTTPError as exc:
            detail = getattr(getattr(exc, "response", None), "text", "")[-500:]
            raise WeightSyncError(
                f"reloading policy version {version} from {folder} failed: {exc} {detail}"
            ) from exc
        self.version = version

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


class WeightFolders:
    """The trainer's weights written for the server, one folder per policy version."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def path(self, version: int) -> Path:
        return self.root / f"v{version:05d}"

    def publish(self, model: Any, version: int) -> float:
        """Write ``model``'s weights as policy ``version``; returns the seconds it took."""
        began = time.perf_counter()
        target = self.path(version)
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        save_merged(model, partial)  # a LoRA policy is served merged (sweflow.training.rl.lora)
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
        return time.perf_counter() - began

    def prune(self, below: int) -> None:
        """Remove the folders of versions older than ``below`` (the server has read newer)."""
        for folder in self.root.glob("v*"):
            if folder.name[1:].isdigit() and int(folder.name[1:]) < below:
                shutil.rmtree(folder, ignore_errors=True)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


SHM_PREFIX = "sweflow-rl-"  # /dev/shm/sweflow-rl-<trainer pid>-<random>


def weight_folders(work: Path, model_bytes: int, shm: Path = Path("/dev/shm")) -> WeightFolders:
    """In /dev/shm when it has room for a few versions (a reload then reads memory), else in
    the work folder. The folders of trainers no longer running (killed: nothing closed them)
    are removed first: each holds a model's weights in memory."""
    if shm.is_dir():
        _remove_orphans(shm)
        if shutil.disk_usage(shm).free > 4 * model_bytes:
            return WeightFolders(shm / f"{SHM_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}")
    return WeightFolders(work / "weights")


def _remove_orphans(shm: Path) -> None:
    for folder in shm.glob(f"{SHM_PREFIX}*-*"):
        pid = folder.name.removeprefix(SHM_PREFIX).split("-")[0]
        if pid.isdigit() and not running(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def serve_policy(policy: Path, rl: RLConfig, log: Path, *, gpu: bool) -> Iterator[ServedPolicy]:
    """A vLLM server of ``policy`` for the run's rollouts, stopped when the block ends."""
    package_root = str(Path(sweflow.__file__).resolve().parents[1])  # the extension's import
    pythonpath = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
    args = [
        "--dtype",
        "bfloat16" if gpu else "float32",
        "--logprobs-mode",
        "processed_logprobs",
        "--worker-extension-cls",
        EXTENSION,
        "--seed",
        str(rl.seed),
    ]
    if gpu:  # the trainer shares the GPU
        args += ["--gpu-memory-utilization", "0.3"]
    cfg = ServeConfig(
        model=policy,
        served_name=SERVED_NAME,
        port=free_port(),
        tool_parser=None,
        max_model_len=rl.max_prompt_length + rl.max_response_length,
        extra_args=args,
        env={"VLLM_SERVER_DEV_MODE": "1", "PYTHONPATH": pythonpath},
    )
    with contextlib.ExitStack() as stack:
        try:
            served = stack.enter_context(vllm_server(cfg, log))
        except ServeError as exc:
            raise RLError(
                f"rl.trl.rollout vllm: the vLLM server of the policy did not start ({exc}); set "
                "rl.trl.rollout: hf (sweflow train rl --set trl.rollout=hf) to generate in the "
                "trainer's process instead"
            ) from exc
        yield ServedPolicy(served.base_url, rl.temperature)
