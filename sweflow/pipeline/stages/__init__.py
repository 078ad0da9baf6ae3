"""The pipeline's stages as plain functions, one module per stage or pair of stages.

Prefect wraps these (tasks/), but nothing here knows about it: a stage can be run and tested on
its own with a :class:`~sweflow.pipeline.stages.common.StageContext`. They are registered in
:mod:`sweflow.pipeline.registry`.
"""
