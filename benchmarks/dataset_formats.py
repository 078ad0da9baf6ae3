"""Every dataset format built, validated and graded container-free: ``python
benchmarks/dataset_formats.py [OPTIONS]`` is ``sweflow bench datasets --json [OPTIONS]`` (``--help``
lists them). Per format: rows loaded, built, validated, gold resolved, agreement with the
project's own grader, build minutes and MB per instance.

The method is in sweflow/bench/datasets.py.
"""

from sweflow.cli.main import run_script

if __name__ == "__main__":
    run_script("datasets")
