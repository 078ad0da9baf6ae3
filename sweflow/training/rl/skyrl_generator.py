"""The ``skyrl`` backend's side inside SkyRL: sweflow's episodes as a SkyRL generator.

SkyRL's trainer (skyrl-train 0.3.1, ``RayPPOTrainer``) asks its generator for a batch of
trajectories each step: :class:`SweflowGenerator` plays one episode of the sweflow agent per
trajectory (sweflow.training.rl.episode: the same tools, templates and limits as collect and
infer, in a fresh sandbox, graded by the harness-identical grader), reaching the policy token in,
token out through SkyRL's InferenceEngineClient (its vLLM engines, local or remote), and returns
the episodes' tokens, loss masks and rewards. The task of each row is its ``instance_id`` column,
found in the rollout context file (sweflow.training.rl.rollout_context) that
``+sweflow.context`` names. Episodes the machinery failed, or whose first prompt is longer than
``rl.max_prompt_length``, train nothing and score 0; responses are cut to
``rl.max_response_length``. SkyRL's evaluation batches (``rl.validation``) are episodes too, and
their outcomes are written to ``+sweflow.validation``/<step>.jsonl, read back by sweflow's own
pass@k estimator.

``python -m sweflow.training.rl.skyrl_generator compose OUT OVERRIDE...`` composes SkyRL's
``ppo_base_config`` with Hydra's compose API and the overrides and runs SkyRL's validate_cfg,
as its main does before it starts anything; the resolved config goes to OUT, a refusal is one
line on stderr (``error: ...``), exit 2. ``... train OVERRIDE...`` is SkyRL's main with this
generator and a tracker that also writes each step's metrics to ``+sweflow.metrics`` (JSON
lines ``{"step", "data"}``), where sweflow reads its step records.

This module imports SkyRL: it is loaded in SkyRL's environment (.venv-skyrl), never by the
pipeline. Everything up to SkyRL's model workers runs without a GPU and without flash-attn;
``build_models`` and what follows (FSDP workers, the weight sync, the update) need both.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from importlib.resources import files
from pathlib import Path
from typing import Any

from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.generators.base import GeneratorInput, GeneratorInterface, GeneratorOutput
from skyrl_train.inference_engines.base import InferenceEngineInput
from skyrl_train.inference_engines.utils import get_sampling_params_for_backend
from skyrl_train.utils.tracking import Tracking

from sweflow.training.rl.episode import Episode, run_episode
from sweflow.training.rl.rollout_context import rollout_context
from sweflow.training.rl.rollouts import trained_mask

EXIT_REFUSED = 2
CONFIG_NAME = "ppo_base_config"


class SweflowGenerator(GeneratorInterface):
    """Each trajectory an episode of the sweflow agent on its row's task, rewarded by its tests."""

    def __init__(
        self,
        generator_cfg: Any,
        client: Any,
        tokenizer: Any,
        context: str,
        validation: str | None = None,
    ) -> None:
        self.cfg, self.client, self.tokenizer = generator_cfg, client, tokenizer
        self.context = rollout_context(context)
        self.validation = Path(validation) if validation else None

    async def generate(self, input_batch: GeneratorInput) -> GeneratorOutput:
        params = input_batch.get("sampling_params") or get_sampling_params_for_backend(
            self.cfg.backend, self.cfg.sampling_params
        )
        rows = input_batch["env_extras"] or []
        episodes = await asyncio.gather(
            *(self._episode(row["instance_id"], dict(params)) for row in rows)
        )
        metadata = input_batch.get("batch_metadata")
        if metadata is not None and metadata.training_phase == "eval":
            self._dump_validation(metadata.global_step, episodes)
        return self.output(episodes, input_batch.get("trajectory_ids"))

    async def _episode(self, instance_id: str, params: dict[str, Any]) -> Episode:
        ctx, session = self.context, uuid.uuid4().hex  # one session: SkyRL routes its turns alike
        # the text of a reply keeps its end-of-turn token, for engines that return text only
        params["skip_special_tokens"] = False

        async def generate(ids: list[int], max_new: int) -> tuple[list[int], list[float]]:
            out = await self.client.generate(
                InferenceEngineInput(
                    prompt_token_ids=[ids],
                    sampling_params={**params, "max_tokens": max_new},
                    session_ids=[session],
                )
            )
            tokens = list(out["response_ids"][0])
            logprobs = out.get("response_logprobs")
            return tokens, list(logprobs[0]) if logprobs else [0.0] * len(tokens)

        async with ctx.open:
            return await run_episode(ctx.tasks[instance_id], ctx.env, ctx.encoder, generate, ctx.rl)

    def output(self, episodes: list[Episode], trajectory_ids: Any) -> GeneratorOutput:
        """The episodes as SkyRL trains them, and their figures for its step metrics."""
        rl, eos = self.context.rl, self.tokenizer.eos_token_id
        prompts, responses, masks, rewards, logprobs, stops = [], [], [], [], [], []
        for episode in episodes:
            failed = bool(episode.infra_failure) or len(episode.prompt_ids) > rl.max_prompt_length
            mask = [0] * len(episode.response_ids) if failed else trained_mask(episode, rl)
            limit = rl.max_response_length
            prompts.append(episode.prompt_ids[-rl.max_prompt_length :] or [eos])
            responses.append(episode.response_ids[:limit] or [eos])
            masks.append(mask[:limit] or [0])
            logprobs.append(episode.logprobs[:limit] or [0.0])
            rewards.append(0.0 if failed or episode.reward is None else float(episode.reward))
            stops.append("length" if episode.truncated else "stop")
        wants_logprobs = self.cfg.sampling_params.get("logprobs") is not None
        return GeneratorOutput(
            prompt_token_ids=prompts,
            response_ids=responses,
            rewards=rewards,
            loss_masks=masks,
            stop_reasons=stops,
            rollout_metrics=rollout_metrics(episodes),
            rollout_logprobs=logprobs if wants_logprobs else None,
            trajectory_ids=trajectory_ids,
            is_last_step=None,
        )

    def _dump_validation(self, step: int, episodes: list[Episode]) -> None:
        """An evaluation's outcomes, one line per episode, as verl's validation dump has them."""
        if self.validation is None:
            return
        self.validation.mkdir(parents=True, exist_ok=True)
        lines = [
            json.dumps(
                {
                    "instance_id": e.instance_id,
                    "resolved": float(e.resolved),
                    "infra_failure": float(bool(e.infra_failure)),
                }
            )
            for e in episodes
        ]
        (self.validation / f"{step}.jsonl").write_text("".join(f"{line}\n" for line in lines))


def rollout_metrics(episodes: list[Episode]) -> dict[str, float]:
    """What sweflow counts per episode, under ``sweflow/``, for SkyRL's step metrics."""
    scored = [e for e in episodes if not e.infra_failure]
    turns = sum(e.steps for e in scored)
    return {
        "sweflow/episodes": float(len(episodes)),
        "sweflow/infra_failures": float(len(episodes) - len(scored)),
        "sweflow/resolve_rate": sum(e.resolved for e in scored) / max(len(scored), 1),
        "sweflow/valid_action_rate": sum(e.valid_steps for e in scored) / max(turns, 1),
        "sweflow/episode_turns": turns / max(len(scored), 1),
        "sweflow/env_s_per_rollout": sum(e.env_s for e in scored) / max(len(scored), 1),
        "sweflow/generation_s_per_rollout": sum(e.generation_s for e in scored)
        / max(len(scored), 1),
    }


class FileTracking(Tracking):
    """SkyRL's tracker (its console, TensorBoard, MLflow and W&B loggers), and a JSON line per
    logged step in ``path``: sweflow's record of the run.

    With MLflow, the run sweflow opened (MLFLOW_RUN_ID) is resumed first: SkyRL's MLflow logger
    logs to an active run, where it would otherwise start one of its own in the experiment named
    like its ``project_name`` (W&B's project), which MLflow refuses beside MLFLOW_RUN_ID."""

    def __init__(self, path: str, backends: list[str], **kwargs: Any) -> None:
        if "mlflow" in backends and os.environ.get("MLFLOW_RUN_ID"):
            import mlflow

            mlflow.start_run()  # the run MLFLOW_RUN_ID names, on MLFLOW_TRACKING_URI
        super().__init__(backends=backends, **kwargs)
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def log(self, data: dict[str, Any], step: int, commit: bool = False) -> None:
        super().log(data, step, commit)
        numbers = {k: v for k, v in data.items() if isinstance(v, int | float)}
        with self.path.open("a") as out:
            out.write(json.dumps({"step": step, "data": numbers}) + "\n")


class Refused(Exception):
    """A setting SkyRL would refuse; the message is one line naming it."""


def compose(overrides: list[str]) -> Any:
    """SkyRL's ppo_base_config with ``overrides``, checked by its validate_cfg."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException
    from skyrl_train.utils import validate_cfg

    config_dir = str(files("skyrl_train") / "config")
    try:
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            config = hydra_compose(CONFIG_NAME, overrides=overrides)
        validate_cfg(config)
    except (HydraException, OmegaConfBaseException, AssertionError, ValueError) as exc:
        raise Refused(" ".join(str(exc).split()) or type(exc).__name__) from None
    return config


def train(config: Any) -> None:
    """SkyRL's main (skyrl_train.entrypoints.main_base) with sweflow's generator and tracker."""
    import ray
    from skyrl_train.utils.utils import initialize_ray

    initialize_ray(config)
    ray.get(ray.remote(num_cpus=1)(run_experiment).remote(config))


class SweflowExperiment(BasePPOExp):
    """SkyRL's experiment (its tokenizer, datasets, engines, trainer and workers) with sweflow's
    generator and tracker; ``+sweflow.*`` name the rollout context and sweflow's files."""

    def get_generator(self, cfg: Any, tokenizer: Any, client: Any) -> SweflowGenerator:
        return SweflowGenerator(
            cfg.generator, client, tokenizer, cfg.sweflow.context, cfg.sweflow.validation
        )

    def get_tracker(self) -> Tracking:
        cfg = self.cfg
        return FileTracking(
            cfg.sweflow.metrics,
            project_name=cfg.trainer.project_name,
            experiment_name=cfg.trainer.run_name,
            backends=list(cfg.trainer.logger),
            config=cfg,
        )


def run_experiment(config: Any) -> None:
    """SkyRL's skyrl_entrypoint, with sweflow's experiment."""
    SweflowExperiment(config).run()


def main(argv: list[str]) -> int:
    from omegaconf import OmegaConf

    command, rest = argv[0], argv[1:]
    try:
        if command == "compose":
            config = compose(rest[1:])
            Path(rest[0]).write_text(OmegaConf.to_yaml(config, resolve=True))
        elif command == "train":
            train(compose(rest))
        else:
            print(f"error: unknown command {command!r} (compose OUT OVERRIDE..., train ...)")
            return EXIT_REFUSED
    except Refused as refused:
        print(f"error: {refused}", file=sys.stderr)
        return EXIT_REFUSED
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
