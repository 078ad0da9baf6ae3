"""Served-model evidence of SFT: `sweflow bench sft-served` without the CLI.

``python benchmarks/sft_served.py [--quick]`` fine-tunes SmolLM2-135M-Instruct on the demo's
train-split replays, serves the base and the fine-tuned model with vLLM in turn, runs the agent
on the held-out toolz tasks and on a few train tasks, and prints one JSON object: per model and
split the valid-action share, the submitted share and the resolve rate
(see sweflow/bench/sft_served.py).
"""

import json
import sys

from sweflow.bench.sft_served import run

if __name__ == "__main__":
    report = run(quick="--quick" in sys.argv, progress=lambda line: print(line, file=sys.stderr))
    print(json.dumps(report, indent=2))
