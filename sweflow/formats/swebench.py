"""SWE-bench (SWE-bench/SWE-bench, _Lite, _Verified, any split): the harness's own rows.

A row is graded by the harness's reports (sweflow.grading), built either from its official
image, named from the instance id exactly as the harness names it
(``swebench.task.checks.expected_image``: ``swebench/sweb.eval.x86_64.<id, "__" as
"_1776_">:latest``), or container-free from the built-in spec tables (the harness's
``MAP_REPO_VERSION_TO_SPECS``, sweflow/data/swebench_specs.yaml). Rows of SWE-bench Multimodal
(screenshots in ``image_assets``, JavaScript repositories) and SWE-bench Multilingual (nine
languages besides Python) are refused: sweflow has no environment recipe for them, and its
agent reads no images.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from swebench.task.checks import expected_image

from sweflow.formats.base import DatasetFormat
from sweflow.harness.specs import builtin_specs
from sweflow.instances.record import RowRefused

COLUMNS = (
    "instance_id",
    "repo",
    "base_commit",
    "patch",
    "test_patch",
    "problem_statement",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
)


@functools.cache
def swebench_repos() -> frozenset[str]:
    """The Python repositories of SWE-bench (full, Lite, Verified): the built-in table's."""
    return frozenset(builtin_specs().specs)


class SweBench(DatasetFormat):
    name = "swebench"
    required = (*COLUMNS, "version")
    description = "SWE-bench: full, Lite, Verified, any split (SWE-bench/SWE-bench*)"

    def detect(self, row: Mapping[str, Any]) -> bool:
        if not super().detect(row):
            return False
        return row["repo"] in swebench_repos() or bool(row.get("image_assets"))

    def task_fields(self, row: dict[str, Any]) -> dict[str, Any]:
        if row.get("image_assets") not in (None, "", "{}", {}):
            raise RowRefused(
                "a SWE-bench Multimodal row: its issue's screenshots (image_assets) need an "
                "agent that reads images, and its JavaScript repository an environment recipe "
                "sweflow does not have",
                "image_assets",
            )
        if row["repo"] not in swebench_repos() and not row.get("eval_script"):
            raise RowRefused(
                f"a SWE-bench Multilingual row ({row['repo']}): sweflow has environment "
                "recipes for SWE-bench's Python repositories only, and the row brings no "
                "swebench-5 eval_script and log_parser to run its image with",
                "repo",
            )
        return {}

    def image(self, row: Mapping[str, Any]) -> str | None:
        return expected_image(str(row["instance_id"]))


FORMAT = SweBench()
