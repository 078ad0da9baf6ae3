"""Real SWE-bench rows built and validated container-free: ``python benchmarks/swebench_rows.py
[OPTIONS]`` is ``sweflow bench swebench --json [OPTIONS]`` (``--help`` lists them). It prints
one JSON object: tried, built, validated, build seconds p50, store MB per instance beside the
official images, a named reason per failure.

The method is in sweflow/bench/swebench.py.
"""

from sweflow.cli.main import run_script

if __name__ == "__main__":
    run_script("swebench")
