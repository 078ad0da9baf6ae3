"""The agent: a SWE-agent-style loop over a sandbox, an OpenAI-compatible model client, batch
runs with resume, trajectories and their exports.

from sweflow.agent import AgentConfig, Batch, ModelClient, ModelConfig
client = ModelClient(ModelConfig(base_url="http://127.0.0.1:8000/v1", model="smollm2"))
trajectories = await Batch(client, AgentConfig(), out_dir, spec_for).run(instances)
"""

from __future__ import annotations

from sweflow.agent.actions import Action, FormatError
from sweflow.agent.client import Completion, ContextLengthError, ModelClient, ModelError
from sweflow.agent.config import AgentConfig, AgentLimits, ModelConfig, ToolMode
from sweflow.agent.export import STYLES, predictions, write_predictions, write_sft
from sweflow.agent.loop import AgentRun, run_agent
from sweflow.agent.runner import Batch, trajectory_path
from sweflow.agent.tools import TOOL_SPECS
from sweflow.agent.trajectory import StepRecord, Trajectory

__all__ = [
    "STYLES",
    "TOOL_SPECS",
    "Action",
    "AgentConfig",
    "AgentLimits",
    "AgentRun",
    "Batch",
    "Completion",
    "ContextLengthError",
    "FormatError",
    "ModelClient",
    "ModelConfig",
    "ModelError",
    "StepRecord",
    "ToolMode",
    "Trajectory",
    "predictions",
    "run_agent",
    "trajectory_path",
    "write_predictions",
    "write_sft",
]
