"""One line per pipeline stage as a flow run goes: what a person watching a terminal wants.

``prefect deployment run --watch`` prints every state event of the flow run with its UUIDs; the
events belong in the UI. This polls the server's REST API instead and prints a stage when it
starts and when it ends: its name, state, seconds and key figure (the summary line its report
artifact opens with, as ``build_envs: 36 built, 0 cached``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

FINAL = ("COMPLETED", "FAILED", "CANCELLED", "CRASHED")
POLL_S = 1.0
FIGURE_CHARS = 100  # a line fits a terminal; the whole summary is in the stage's artifact

Api = Callable[..., Any]  # LocalPrefect.api: (path, body=None) -> the reply's JSON


def stage_and_config(task_run_name: str) -> tuple[str, str]:
    """``"build_envs [demo]"`` -> ``("build_envs", "demo")`` (the stage tasks' run names)."""
    stage, _, rest = task_run_name.partition(" [")
    return stage, rest.rstrip("]")


def key_figure(api: Api, stage: str, config_name: str) -> str:
    """The stage's summary line from its newest report artifact (a cached stage's is the run's
    that computed it), without the stage's name; "" when it has none yet."""
    key = f"{config_name}-{stage}-report".lower().replace("_", "-")
    found = api("artifacts/latest/filter", {"artifacts": {"key": {"any_": [key]}}, "limit": 1})
    if not found:
        return ""
    lines = [line for line in str(found[0].get("data") or "").splitlines() if line.strip()]
    summary = lines[1] if len(lines) > 1 else ""
    return summary.partition(": ")[2] if summary.startswith(f"{stage}:") else summary


def stage_line(api: Api, run: dict) -> str:
    """The line of a task run that has just ended."""
    stage, config_name = stage_and_config(run["name"])
    state = run["state"]
    seconds = float(run.get("total_run_time") or 0.0)
    if state["type"] == "COMPLETED":
        figure = key_figure(api, stage, config_name)
    else:
        figure = (state.get("message") or "").strip().splitlines()[:1]
        figure = figure[0] if figure else ""
    if len(figure) > FIGURE_CHARS:
        cut = figure[: FIGURE_CHARS - 4]
        figure = (cut.rpartition(", ")[0] or cut) + " ..."
    return f"  {stage:<22}{state['name']:<10}{seconds:>8.1f} s   {figure}".rstrip()


def watch(
    api: Api, flow_run_id: str, out: Callable[[str], None] = print, deadline: float = float("inf")
) -> str:
    """Print each stage's start and end until the flow run is final (its state name), or
    raise TimeoutError at ``deadline`` (``time.monotonic()``)."""
    printed: dict[str, str] = {}  # task run id -> "started" | "retrying" | "ended"
    while time.monotonic() < deadline:
        flow = api(f"flow_runs/{flow_run_id}")
        runs = api(
            "task_runs/filter",
            {"flow_runs": {"id": {"any_": [flow_run_id]}}, "sort": "EXPECTED_START_TIME_ASC"},
        )
        for run in runs:
            if run.get("state") is None:  # created, its first state not yet set
                continue
            kind, seen = run["state"]["type"], printed.get(run["id"])
            if kind == "RUNNING" and seen is None:
                out(f"  {stage_and_config(run['name'])[0]:<22}started")
                printed[run["id"]] = "started"
            elif run["state"]["name"] == "AwaitingRetry" and seen == "started":
                out(stage_line(api, run) + " (retried)")
                printed[run["id"]] = "retrying"
            elif kind == "RUNNING" and seen == "retrying":
                out(f"  {stage_and_config(run['name'])[0]:<22}started again")
                printed[run["id"]] = "started"
            elif kind in FINAL and seen != "ended":
                if seen is None and run["state"]["name"] != "Cached":  # ran between two polls
                    out(f"  {stage_and_config(run['name'])[0]:<22}started")
                out(stage_line(api, run))
                printed[run["id"]] = "ended"
        if flow.get("state") and flow["state"]["type"] in FINAL:
            return flow["state"]["name"]
        time.sleep(POLL_S)
    raise TimeoutError(f"flow run {flow_run_id} is not final by its deadline")
