"""The agent: a SWE-agent-style loop over a sandbox, an OpenAI-compatible model client and
trajectories (this package's modules); the replay teacher (``teacher/``); batches of runs with
resume, said once as a plan, and their exports (``runs/``). The loop imports neither.

from sweflow.agent import AgentConfig, ModelConfig, RunPlan, run_plan
model = ModelConfig(base_url="http://127.0.0.1:8000/v1", model="smollm2")
plan = RunPlan(agent=AgentConfig(), out_dir=out_dir, store=store, model=model)
trajectories = await run_plan(plan, lambda batch: batch.run(instances))

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
    "STYLES": "runs.export",
    "predictions": "runs.export",
    "write_predictions": "runs.export",
    "write_sft": "runs.export",
    "AgentRun": "loop",
    "run_agent": "loop",
    "Batch": "runs.batch",
    "trajectory_path": "runs.batch",
    "RunPlan": "runs.plan",
    "run_plan": "runs.plan",
    "TOOL_SPECS": "tools",
    "TOOLS": "tools",
    "Tool": "tools",
    "StepRecord": "trajectory",
    "Trajectory": "trajectory",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
