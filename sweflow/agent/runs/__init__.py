"""Batches of agent runs and their products: one typed plan and the one function that runs it
(``plan``: RunPlan, run_plan), in this process (``batch``) or as an executor's work items
(``executor_batch``); the jobs run on it (``jobs``: collect, infer); what runs become
(``export``: SFT data and predictions; ``scores``: what a run did against its gold patch)."""
