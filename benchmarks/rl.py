"""RL benchmark: `sweflow bench rl` without the CLI.

``python benchmarks/rl.py [--quick]`` builds demo train environments, times the environment work
of one rollout (the same actions in a fresh sandbox, then the grading) with the local and the
docker backend against the bare tests, runs a few GRPO steps of SmolLM2-135M-Instruct (briefly
fine-tuned on golden trajectories) with the trl backend, and prints one JSON object: the per-step
time split, env_share_of_step, rollouts per minute and the mean reward of the first and last
quarter of the steps (see sweflow/bench/rl.py for the method).
"""

import json
import sys

from sweflow.bench.rl import run

if __name__ == "__main__":
    report = run(quick="--quick" in sys.argv, progress=lambda line: print(line, file=sys.stderr))
    print(json.dumps(report, indent=2))
