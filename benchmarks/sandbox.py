"""Sandbox benchmark: ``python benchmarks/sandbox.py [OPTIONS]`` is ``sweflow bench sandbox --json
[OPTIONS]`` (``--help`` lists them). It prints one JSON object: open+exec+close latency, exec
overhead, idle memory and leaks: local vs docker vs e2b on one rootfs (the e2b figures go
through sweflow's E2B endpoint on loopback).

The method is in sweflow/bench/sandbox.py.
"""

from sweflow.cli.main import run_script

if __name__ == "__main__":
    run_script("sandbox")
