"""Ray executor benchmark: `sweflow bench ray` without the CLI.

``python benchmarks/ray_cluster.py [--quick]`` starts a Ray cluster of this machine (``sweflow ray
start`` nodes, stopped by PID), grades the gold patches of a demo slice with the local executor
and on the cluster, and prints one JSON object: seconds per instance both ways, the Ray
executor's overhead per instance, throughput on one and two nodes and the layer transfer rate
between the nodes (see sweflow/bench/ray.py for the method).
"""

import json
import sys

from sweflow.bench.ray import run

if __name__ == "__main__":
    report = run(quick="--quick" in sys.argv, progress=lambda line: print(line, file=sys.stderr))
    print(json.dumps(report, indent=2))
