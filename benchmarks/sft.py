"""SFT benchmark: ``python benchmarks/sft.py [OPTIONS]`` is ``sweflow bench sft --json [OPTIONS]``
(``--help`` lists them). It prints one JSON object: tokens/s and peak RSS of torchtune's recipe
against TRL's SFTTrainer on the same sequences, and the held-out loss before and after.

The method is in sweflow/bench/sft.py.
"""

from sweflow.cli.main import run_script

if __name__ == "__main__":
    run_script("sft")
