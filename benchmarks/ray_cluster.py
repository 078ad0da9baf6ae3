"""Ray executor benchmark: ``python benchmarks/ray_cluster.py [OPTIONS]`` is ``sweflow bench ray
--json [OPTIONS]`` (``--help`` lists them). It prints one JSON object: the Ray executor's
overhead per instance on real gradings, throughput on one and two nodes and the layer transfer
rate between them.

The method is in sweflow/bench/ray.py.
"""

from sweflow.cli.main import run_script

if __name__ == "__main__":
    run_script("ray")
