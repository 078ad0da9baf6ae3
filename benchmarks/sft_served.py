"""Served-model evidence of SFT: ``python benchmarks/sft_served.py [OPTIONS]`` is ``sweflow bench
sft-served --json [OPTIONS]`` (``--help`` lists them). It prints one JSON object: base vs
fine-tuned SmolLM2 served by vLLM: valid actions, submissions, resolve rate on eval and train
tasks.

The method is in sweflow/bench/sft_served.py.
"""

from sweflow.cli.bench import run_script

if __name__ == "__main__":
    run_script("sft-served")
