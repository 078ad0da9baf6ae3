"""Real SWE-bench rows built and validated container-free: `sweflow bench swebench` without the CLI.

``python benchmarks/swebench_rows.py [--quick] [DATASET MIRROR STORE]`` builds each row whose
repository the mirror holds with the built-in spec table (or a specs.yaml beside the rows),
validates it as the harness would and prints one JSON object: tried, built, validated, build
seconds p50, store MB per instance beside the official images, and a named reason per failure
(see sweflow/bench/swebench.py). With no paths: the committed Flask sample.
"""

import json
import sys
from pathlib import Path

from sweflow.bench.swebench import run

if __name__ == "__main__":
    paths = [Path(a) for a in sys.argv[1:] if not a.startswith("--")]
    dataset, mirror, store = (paths + [None, None, None])[:3]
    report = run(dataset, mirror, store, limit=1 if "--quick" in sys.argv else 0,
                 progress=lambda line: print(line, file=sys.stderr))  # fmt: skip
    print(json.dumps(report, indent=2))
