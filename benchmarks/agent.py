"""Agent benchmark: ``python benchmarks/agent.py [OPTIONS]`` is ``sweflow bench agent --json
[OPTIONS]`` (``--help`` lists them). It prints one JSON object: the agent's own time per step
(everything but a fixed model latency) and rollouts per minute at concurrency 1, 8 and 32
against the ideal.

The method is in sweflow/bench/agent.py.
"""

from sweflow.cli.main import run_script

if __name__ == "__main__":
    run_script("agent")
