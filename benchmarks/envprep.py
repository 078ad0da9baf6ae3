"""Environment-preparation benchmark: ``python benchmarks/envprep.py [OPTIONS]`` is ``sweflow bench
envprep --json [OPTIONS]`` (``--help`` lists them). It prints one JSON object: cache-to-ready
time and bytes per instance, sweflow vs untar vs docker (vs the e2b modes); ``--representative``
adds an environment of a typical SWE-bench size.

The method is in sweflow/bench/envprep.py.
"""

from sweflow.cli.main import run_script

if __name__ == "__main__":
    run_script("envprep")
