"""Reward benchmark: ``python benchmarks/reward.py [OPTIONS]`` is ``sweflow bench reward --json
[OPTIONS]`` (``--help`` lists them). It prints one JSON object: reward wall time p50, local and
docker backends, against swebench's run_evaluation and the bare tests.

The method is in sweflow/bench/reward.py.
"""

from sweflow.cli.main import run_script

if __name__ == "__main__":
    run_script("reward")
