"""A saved run: the OpenAI-format conversation plus every action, observation, timing and token
count, the exit status, the patch and (after grading) the reward. One JSON file per run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from sweflow.errors import ConfigError
from sweflow.instances.write import _atomic_write

# Exit statuses. A run ends by submitting, on a limit, or on a failure of the infrastructure;
# only the latter two are re-run when a batch resumes (the model's own choices are results).
SUBMITTED = "submitted"
STEP_LIMIT = "step_limit"
TIME_LIMIT = "time_limit"
TOKEN_LIMIT = "token_limit"
CONTEXT_LIMIT = "context_limit"
FORMAT_ERROR = "format_error"
MODEL_ERROR = "model_error"
SANDBOX_ERROR = "sandbox_error"
DECLINED = "declined"  # a teacher saw no way to do the task that a student could follow
INFRA_FAILURES = frozenset({MODEL_ERROR, SANDBOX_ERROR})


class ActionRecord(BaseModel):
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    call_id: str | None = None
    observation: str = ""
    exec_s: float = 0.0


class StepRecord(BaseModel):
    """One model call and what came of it."""

    index: int
    thought: str = ""
    actions: list[ActionRecord] = Field(default_factory=list)
    format_error: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    retries: int = 0
    model_s: float = 0.0
    exec_s: float = 0.0
    step_s: float = 0.0

    @property
    def overhead_s(self) -> float:
        """The agent's own time in this step: everything but the model and the sandbox."""
        return max(0.0, self.step_s - self.model_s - self.exec_s)


class Imitability(BaseModel):
    """Of a run's actions that open, edit, run or search the repository (``checked``), how many
    rest on what the run had seen before them, the issue or an observation (``grounded``); a
    note on each that did not (sweflow.agent.teacher.imitable)."""

    checked: int = 0
    grounded: int = 0
    ungrounded: list[str] = Field(default_factory=list)

    @property
    def fraction(self) -> float:
        return self.grounded / self.checked if self.checked else 1.0


class Trajectory(BaseModel):
    format: int = 1
    instance_id: str
    run: int = 0
    model: str = ""
    source: str = "model"  # what produced the replies: "model", or a teacher such as "replay"
    tool_mode: str = "tools"
    config: dict[str, Any] = Field(default_factory=dict)
    tools: list[dict[str, Any]] | None = None
    messages: list[dict[str, Any]] = Field(default_factory=list)
    steps: list[StepRecord] = Field(default_factory=list)
    exit_status: str = ""
    error: str = ""
    patch: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    started_at: str = ""
    wall_s: float = 0.0
    sandbox_open_s: float = 0.0
    reward: dict[str, Any] | None = None
    imitable: Imitability | None = None
    # one of many samples of its task: index, temperature and seed (sweflow.agent.runs.samples)
    sampling: dict[str, Any] | None = None

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def resolved(self) -> bool:
        return bool(self.reward and self.reward.get("resolved"))

    def save(self, path: Path) -> Path:
        """Write atomically: a crash mid-write never leaves a file that looks complete."""
        data = self.model_dump_json(indent=1).encode()
        return _atomic_write(Path(path), lambda fh: fh.write(data))

    @classmethod
    def load(cls, path: Path) -> Trajectory:
        return cls.model_validate(json.loads(Path(path).read_text()))


def load_run(path: Path) -> Trajectory:
    """A saved run; a file that is not one raises a ConfigError naming it."""
    try:
        return Trajectory.load(path)
    except (ValueError, ValidationError) as exc:  # JSONDecodeError is a ValueError
        why = str(exc).splitlines()[0]
        raise ConfigError(f"{path}: not a saved agent run ({why})") from exc


def load_runs(out_dir: Path) -> list[Trajectory]:
    """Every run an agent job saved under ``out_dir`` (``trajectories/<task>/run-<k>.json``), in
    task order; a file that is not a run raises a ConfigError naming it."""
    return [load_run(p) for p in sorted((Path(out_dir) / "trajectories").glob("*/run-*.json"))]
