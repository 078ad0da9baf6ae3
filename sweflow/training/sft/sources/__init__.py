"""SFT data from the trajectories people already have: sweflow's own, and public sets (SWE-smith,
SWE-agent, OpenHands) by file or Hugging Face id, converted to the student's tool mode, mixed,
and reported row by row (spec: where from; rows: reading; formats and its parsers: what each
row says; episode: the student's conversation; mix: the mix and its report)."""
