"""How an agent run is configured: the model endpoint, the limits, the prompts, the tool mode.

Pydantic models, so that a YAML pipeline config validates into them (the pipeline embeds these
classes rather than copying their fields) and a trajectory records exactly what produced it.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from sweflow.agent.templates import SYSTEM_TEMPLATE, TASK_TEMPLATE
from sweflow.configfile import ConfigModel
from sweflow.errors import ConfigError

ToolMode = Literal["tools", "text"]
# how the replay teacher writes an edit: the editor command it demonstrates
TeacherEdits = Literal["str_replace", "replace_lines"]


class SamplingConfig(ConfigModel):
    """How each model call is made: sampling, reply length, timeouts and retries."""

    temperature: float = Field(0.0, ge=0, description="0: greedy")
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(1024, gt=0, description="completion tokens per call")
    request_timeout_s: float = Field(600.0, gt=0)
    retry_budget_s: float = Field(
        600.0, ge=0, description="how long to keep retrying an unreachable or failing server"
    )
    retry_initial_s: float = Field(0.5, gt=0)
    retry_max_s: float = Field(15.0, gt=0)


class ModelConfig(SamplingConfig):
    """An OpenAI-compatible chat endpoint (a hosted model, or our own vLLM server)."""

    base_url: str = Field(description="e.g. http://127.0.0.1:8000/v1")
    model: str
    api_key: str = Field("EMPTY", repr=False)


class AgentLimits(ConfigModel):
    """When a run stops on its own; each ends it with its own exit status."""

    max_steps: int = Field(50, gt=0, description="model calls")
    max_wall_s: float = Field(1800.0, gt=0, description="whole run, model time included")
    max_total_tokens: int | None = Field(None, gt=0, description="prompt+completion, all calls")
    max_context_tokens: int | None = Field(
        None, gt=0, description="a prompt past this ends the run (context_limit)"
    )
    max_observation_chars: int = Field(
        10_000, gt=200, description="longer outputs keep their head and tail"
    )
    command_timeout_s: float = Field(120.0, gt=0, description="one bash action")
    max_format_errors: int = Field(3, gt=0, description="unparseable replies in a row")


class AgentConfig(AgentLimits):
    """One agent: its prompts, how it talks to the model, and its limits (one name each)."""

    tool_mode: ToolMode = Field(
        "tools", description="native OpenAI tool calls, or one fenced bash block per reply"
    )
    system_template: str = SYSTEM_TEMPLATE
    task_template: str = TASK_TEMPLATE
    repeat_guard: bool = Field(
        True,
        description="a reply that repeats the previous reply's actions is not run again: "
        "the model is told its output would not change (small models loop on one action)",
    )
    hide_durations: bool = Field(
        False,
        description="cut test runners' durations (pytest's `in 0.61s`) from bash output, so "
        "that two runs of one policy read the same text: golden trajectories, and the SFT "
        "data made from them, repeat byte for byte",
    )


# -- teachers: who plays the model when golden trajectories are collected -------------------------
# ConfigModel's rules but its check of each field, which pydantic refuses on the discriminator
# (`kind`): a teacher has no number for it to check.
TEACHER = ConfigDict(extra="forbid", allow_inf_nan=False)


class ServedTeacher(BaseModel):
    """The model being trained, as served for the run (today's behaviour)."""

    model_config = TEACHER
    kind: Literal["served"] = "served"


class EndpointTeacher(BaseModel):
    """Any OpenAI-compatible endpoint: a bigger vLLM-served model, or a hosted API."""

    model_config = TEACHER
    kind: Literal["endpoint"] = "endpoint"
    url: str = Field(description="base URL, e.g. http://10.0.0.5:8000/v1")
    model: str = Field(description="the model name at that endpoint")
    api_key_env: str | None = Field(
        "OPENAI_API_KEY", description="the environment variable holding the key (None: no key)"
    )

    def api_key(self) -> str:
        """The key from the environment, or a ConfigError naming the variable."""
        if self.api_key_env is None:
            return "EMPTY"
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ConfigError(
                f"teacher {self.model} at {self.url}: the environment variable "
                f"{self.api_key_env} (its API key) is not set"
            )
        return key


class ReplayTeacher(BaseModel):
    """The gold patch found by clues and made through the agent's own tools, the way a student
    could (sweflow.agent.teacher.replay)."""

    model_config = TEACHER
    kind: Literal["replay"] = "replay"
    edits: TeacherEdits = Field(
        "str_replace",
        description="the editor command its edits use: str_replace quotes the old text, "
        "replace_lines names it by the line numbers its views showed",
    )


def _teacher_shorthand(value: Any) -> Any:
    """``teacher: replay`` for ``teacher: {kind: replay}``."""
    return {"kind": value} if isinstance(value, str) else value


Teacher = Annotated[
    Annotated[ServedTeacher | EndpointTeacher | ReplayTeacher, Field(discriminator="kind")],
    BeforeValidator(_teacher_shorthand),
]
