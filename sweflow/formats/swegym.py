"""SWE-Gym (SWE-Gym/SWE-Gym, SWE-Gym-Lite): SWE-bench rows of 11 other Python repositories.

The rows have SWE-bench's columns; what tells them apart is the repository. They are graded by
the harness's reports (SWE-Gym's fork, SWE-Gym/SWE-Bench-Fork, changes the specs, not the
grading), built from SWE-Gym's images (``xingyaoww/sweb.eval.x86_64.<id, "__" as "_s_">``,
lowercase: the names OpenHands and SkyRL pull) or container-free from the fork's spec tables
(sweflow/data/swegym_specs.yaml, scripts/swegym_specs.py).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

from sweflow.formats.base import DatasetFormat
from sweflow.formats.swebench import COLUMNS
from sweflow.harness.specs import SpecTable, packaged_specs
from sweflow.instances import Instance


@functools.cache
def swegym_specs() -> SpecTable:
    """The fork's specs of SWE-Gym's repositories (sweflow/data/swegym_specs.yaml)."""
    return packaged_specs("swegym_specs.yaml")


class SweGym(DatasetFormat):
    name = "swe-gym"
    required = (*COLUMNS, "version")
    description = "SWE-Gym: SWE-bench rows of 11 more repositories (SWE-Gym/SWE-Gym*)"

    def detect(self, row: Mapping[str, Any]) -> bool:
        return super().detect(row) and row["repo"] in swegym_specs().specs

    def task_fields(self, row: dict[str, Any]) -> dict[str, Any]:
        return {}

    def image(self, row: Mapping[str, Any]) -> str | None:
        iid = str(row["instance_id"]).replace("__", "_s_")
        return f"xingyaoww/sweb.eval.x86_64.{iid}:latest".lower()

    def recipes(self, rows: Iterable[Instance]) -> SpecTable:
        return swegym_specs()


FORMAT = SweGym()
