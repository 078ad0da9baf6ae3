"""Pipeline benchmark: ``python benchmarks/prefect_pipeline.py [OPTIONS]`` is ``sweflow bench
pipeline --json [OPTIONS]`` (``--help`` lists them). It prints one JSON object:
`end-to-end/demo` on a private Prefect server: cold run, cached re-run, retry after an injected
failure, stage start latency.

The method is in sweflow/bench/pipeline.py.
"""

from sweflow.cli.main import run_script

if __name__ == "__main__":
    run_script("pipeline")
