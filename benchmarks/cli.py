"""CLI start-up benchmark: `sweflow bench cli` without the CLI's own start-up in the way.

``python benchmarks/cli.py [--quick]`` runs ``sweflow --help``, ``sweflow version`` and
``sweflow sandbox run true`` as fresh processes, interleaved with ``python -c pass``, and prints
one JSON object: p50/p90 wall seconds per command and the p50 over the baseline.
"""

import json
import sys

from sweflow.bench.cli import run

if __name__ == "__main__":
    report = run(quick="--quick" in sys.argv, progress=lambda line: print(line, file=sys.stderr))
    print(json.dumps(report, indent=2))
