"""The agent: a SWE-agent-style loop over a sandbox, an OpenAI-compatible model client, batch
runs with resume, trajectories and their exports.

from sweflow.agent import AgentConfig, Batch, ModelClient, ModelConfig
client = ModelClient(ModelConfig(base_url="http://127.0.0.1:8000/v1", model="smollm2"))
trajectories = await Batch(client, AgentConfig(), out_dir, spec_for).run(instances)

Names are imported on first use, so the config models load without the openai client.
"""

from __future__ import annotations

from sweflow.lazy import lazy_exports

_EXPORTS = {
    "Action": "actions",
    "FormatError": "actions",
    "Completion": "client",
    "ContextLengthError": "client",
    "ModelClient": "client",
    "ModelError": "client",
    "ModelUnavailableError": "client",
    "AgentConfig": "config",
    "AgentLimits": "config",
    "ModelConfig": "config",
    "SamplingConfig": "config",
    "ToolMode": "config",
    "STYLES": "export",
    "predictions": "export",
    "write_predictions": "export",
    "write_sft": "export",
    "AgentRun": "loop",
    "run_agent": "loop",
    "Batch": "batch",
    "trajectory_path": "batch",
    "TOOL_SPECS": "tools",
    "TOOLS": "tools",
    "Tool": "tools",
    "StepRecord": "trajectory",
    "Trajectory": "trajectory",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
