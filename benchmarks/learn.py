"""Does training make the agent better at fixing code? ``python benchmarks/learn.py [OPTIONS]`` is
``sweflow bench learn --json [OPTIONS]`` (``--help`` lists them). It prints one JSON object: base,
SFT and SFT+RL models served by vLLM as the agent on held-out tasks (valid actions, reproduced,
right file, right hunk, submitted, resolved) and RL's resolve rate before and after on its train
tasks; plots and every run are in the run folder it names.

The method is in sweflow/bench/learn.py.
"""

from sweflow.cli.main import run_script

if __name__ == "__main__":
    run_script("learn")
