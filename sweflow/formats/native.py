"""sweflow's own rows: the task record as it is (sweflow.instances.Instance), as written by
``sweflow synth``, the validate stage and swebench-5 task repos; specs beside the data."""

from __future__ import annotations

from typing import Any

from sweflow.formats.base import DatasetFormat


class Sweflow(DatasetFormat):
    name = "sweflow"
    required = ("instance_id", "repo", "base_commit")
    description = "sweflow's own task rows (the task record; specs.yaml beside the data)"

    def task_fields(self, row: dict[str, Any]) -> dict[str, Any]:
        return {}


FORMAT = Sweflow()
