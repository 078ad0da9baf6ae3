"""Reward benchmark on the bundled real data: `sweflow bench reward` without the CLI.

``python benchmarks/reward.py [--quick] [--no-docker] [--no-harness] [--dataset PATH]
[--limit N]`` builds the dataset's instances (default tests/data/envcache; data/demo/tasks.jsonl
works too; offline from the wheelhouse of scripts/prefetch.py) in a scratch store and prints one
JSON object: reward p50 for the local and docker backends and for swebench's run_evaluation,
the bare test time, the local overhead and the speedups (see sweflow/bench/reward.py for the
method). ``--limit N`` grades N instances taken from each repository in turn.
"""

import json
import sys
import tempfile
from pathlib import Path

from sweflow.bench import ENVCACHE, WHEELHOUSE
from sweflow.bench.reward import run
from sweflow.grading.dataset import GradingData


def main(args: list[str]) -> dict:
    dataset = Path(args[args.index("--dataset") + 1]) if "--dataset" in args else ENVCACHE
    with tempfile.TemporaryDirectory(prefix="sweflow-bench-reward-") as tmp:
        data = GradingData.load(dataset, Path(tmp) / "store", WHEELHOUSE)
        return run(
            data,
            quick="--quick" in args,
            limit=int(args[args.index("--limit") + 1]) if "--limit" in args else 0,
            docker="--no-docker" not in args,
            harness="--no-harness" not in args,
            progress=lambda line: print(line, file=sys.stderr),
        )


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:]), indent=2))
