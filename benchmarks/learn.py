"""Does training make the agent better at fixing code? `sweflow bench learn` from this folder.

``python benchmarks/learn.py [--quick]`` runs the training half on the learning set (golden
trajectories, SFT, RL), serves the base, SFT and SFT+RL models with vLLM, runs each as the agent
on held-out tasks and prints one JSON object (see sweflow/bench/learn.py); plots and every run
are in the run folder it names.
"""

import sys

from sweflow.cli import app

if __name__ == "__main__":
    app(["bench", "learn", "--json", *sys.argv[1:]])
