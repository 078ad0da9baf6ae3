"""RL benchmark: ``python benchmarks/rl.py [OPTIONS]`` is ``sweflow bench rl --json [OPTIONS]``
(``--help`` lists them). It prints one JSON object: the RL step's time split (generation /
environment / update), rollouts per minute, the reward of the first and last quarter, and
sandbox + reward seconds per rollout.

The method is in sweflow/bench/rl.py.
"""

from sweflow.cli.main import run_script

if __name__ == "__main__":
    run_script("rl")
