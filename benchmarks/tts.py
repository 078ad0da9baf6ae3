"""Test-time scaling benchmark: ``python benchmarks/tts.py [OPTIONS]`` is ``sweflow bench tts
--json [OPTIONS]`` (``--help`` lists them). It prints one JSON object: pass@k for k = 1..N over
N graded samples per held-out task, best-of-N per selector, oracle pass@N, and the minutes.

The method is in sweflow/bench/tts.py.
"""

from sweflow.cli.main import run_script

if __name__ == "__main__":
    run_script("tts")
