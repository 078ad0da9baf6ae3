"""Agent benchmark (``python benchmarks/agent.py [--quick]``): the same as
``sweflow bench agent --json``; prints the agent's own time per step (everything but a fixed
model latency) and rollouts per minute at concurrency 1, 8 and 32 against the ideal.
"""

import sys

from sweflow.cli import app

if __name__ == "__main__":
    app(["bench", "agent", "--json", *sys.argv[1:]])
