"""What an RL trainer is to sweflow: one protocol, whoever updates the policy.

A backend is given an :class:`RLRun` (the tasks, the starting policy, the ``rl`` section, where
the episodes run, where to write) and answers three questions, which the entry point
(sweflow.training.rl.trainer.train) asks in this order while it holds the work folder's lock:
``result`` (is a model trained from these very inputs already published?), ``resume`` (does a
killed attempt carry on, and from which checkpoint? what any other attempt left is cleared),
then ``train``. A new trainer (OpenRLHF...) is one module with such a class and one line
in sweflow.training.rl.backends; :func:`rl_backend` loads it by name when a run needs it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from sweflow.errors import SweflowError
from sweflow.harness.specs import SpecTable
from sweflow.instances import Instance
from sweflow.registered import load_named
from sweflow.training.rl.backends import RL_BACKENDS, RLBackendError
from sweflow.training.rl.config import RLConfig
from sweflow.training.rl.episode import EpisodeEnv
from sweflow.training.rl.result import RLResult, RLStepRecord
from sweflow.training.rl.side_env import SideEnv
from sweflow.training.workdir import folder_digest

if TYPE_CHECKING:
    from sweflow.tracking import TrackingRun

OnRLStep = Callable[[int, int, RLStepRecord], None]  # (step, total steps, its figures)


class RLError(SweflowError):
    """RL cannot run as configured; the message names what to change."""


class RLInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) stopped training; the message says where a re-run resumes. A
    KeyboardInterrupt still, so that every caller winds down as for any interrupt."""


@dataclass
class RLRun:
    """One RL run's inputs. ``env`` runs episodes in this process (trl); a trainer whose
    episodes run in workers of its own (verl) rebuilds them from ``store``, ``specs`` and
    ``env``'s agent settings and the sandbox ``backend``."""

    tasks: list[Instance]
    policy: Path  # the Hugging Face folder training starts from
    work: Path  # checkpoints, logs, rollouts
    out: Path  # the trained model, published whole
    rl: RLConfig
    env: EpisodeEnv
    store: Path
    specs: SpecTable
    backend: str = "local"  # the sandboxes'
    policy_name: str | None = None  # how the user named the policy (default: its folder)
    val_tasks: list[Instance] = field(default_factory=list)  # rl.validation's
    tracking: TrackingRun | None = None  # the run the trainer's own loggers report to

    @property
    def tensorboard(self) -> bool:
        """Whether the trainer writes TensorBoard's files (``tracking.tensorboard``)."""
        return self.tracking is None or self.tracking.tensorboard

    @property
    def base_model(self) -> str:
        return self.policy_name or str(self.policy)

    @cached_property
    def inputs(self) -> str:
        """The digest a published result, or an attempt to resume, must carry."""
        return hashlib.sha256(
            json.dumps(
                [
                    sorted(t.instance_id for t in self.tasks),
                    folder_digest(self.policy),
                    self.rl.model_dump(),
                    self.env.agent.model_dump(),
                    self.backend,
                    *([sorted(t.instance_id for t in self.val_tasks)] if self.val_tasks else []),
                ]
            ).encode()
        ).hexdigest()


@runtime_checkable
class RLBackend(Protocol):
    """A trainer of the policy on sweflow episodes (see the module docstring)."""

    def result(self, run: RLRun) -> RLResult | None:
        """The result published in ``run.out`` for ``run.inputs``, or None."""
        ...

    def resume(self, run: RLRun) -> Path | None:
        """The checkpoint a killed attempt with the same inputs left, or None: then the work
        folder is cleared of any other attempt's leftovers. Either way this attempt is
        recorded as the folder's."""
        ...

    def train(self, run: RLRun, resume: Path | None, progress: OnRLStep | None) -> RLResult:
        """Train (from ``resume`` when set), publish ``run.out`` and return its record."""
        ...


@runtime_checkable
class LaunchedBackend(Protocol):
    """A backend that launches an outside trainer in its own environment (verl, SkyRL):
    ``--dry-run`` shows the config that trainer composes and the launch.sh sweflow would run."""

    trainer: str  # the trainer's name, for people
    folder: str  # its inputs' folder under the work folder (launch.sh is there)
    environment: SideEnv

    def preview(
        self,
        rl: RLConfig,
        policy: str,
        work: Path,
        *,
        validation: bool,
        compose_in: Path | None,
        max_turns: int,
    ) -> tuple[str | None, str]:
        """The config the trainer composes (None without its environment or ``compose_in``)
        and launch.sh's text, writing nothing under ``work``. ``max_turns``: the agent's
        max_steps (SkyRL's generator.max_turns; verl's agent loop has no such key)."""
        ...


def rl_backend(name: str) -> RLBackend:
    """The backend registered as ``name`` (or at the dotted path ``name``), imported now."""
    return load_named("RL backend", name, RL_BACKENDS, RLBackendError)()
