"""Task-synthesis benchmark: ``python benchmarks/synth.py [OPTIONS]`` is ``sweflow bench synth
--json [OPTIONS]`` (``--help`` lists them). It prints one JSON object: valid tasks per minute
from the demo's three projects, yield per bug operator.

The method is in sweflow/bench/synth.py.
"""

from sweflow.cli.main import run_script

if __name__ == "__main__":
    run_script("synth")
