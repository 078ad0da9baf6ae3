"""CLI start-up benchmark: ``python benchmarks/cli.py [OPTIONS]`` is ``sweflow bench cli --json
[OPTIONS]`` (``--help`` lists them). It prints one JSON object: p50/p90 wall seconds of `sweflow
--help`, `sweflow version` and `sweflow sandbox run true` as fresh processes, interleaved with
`python -c pass`.

The method is in sweflow/bench/cli.py.
"""

from sweflow.cli.main import run_script

if __name__ == "__main__":
    run_script("cli")
