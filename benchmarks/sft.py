"""SFT benchmark: `sweflow bench sft` without the CLI.

``python benchmarks/sft.py [--quick]`` builds demo environments (offline from the wheelhouse of
scripts/prefetch.py when present), replays the gold patches into golden trajectories, trains
SmolLM2-135M-Instruct with torchtune's recipe and with TRL's SFTTrainer on the same 1024-token
sequences, and prints one JSON object: tokens/s and peak RSS of each, and the held-out loss
before and after (see sweflow/bench/sft.py for the method).
"""

import json
import sys

from sweflow.bench.sft import run

if __name__ == "__main__":
    report = run(quick="--quick" in sys.argv, progress=lambda line: print(line, file=sys.stderr))
    print(json.dumps(report, indent=2))
