"""What a dataset format is: how its rows are told apart, turned into task records, given an
environment and graded.

A format maps a raw row to the task record (``sweflow.instances.Instance``) and keeps the row's
own columns: every column the record does not define stays as it is (an extra field), and the
original value of each column the mapping rewrote is kept under ``source_columns``, so
:func:`source_row` gives the published row back. The format's name goes into ``dataset_format``,
which is how a later stage (validation, grading) finds the format of a row it reads back.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from sweflow.errors import SweflowError
from sweflow.harness.specs import EnvSpec, SpecTable
from sweflow.instances import Instance
from sweflow.instances.record import RowRefused

FORMAT_FIELD = "dataset_format"  # the format a row was read as
SOURCE_FIELD = "source_columns"  # original values of the columns the mapping rewrote
COLUMNS_FIELD = "source_column_names"  # the row's own columns, in order


class FormatError(SweflowError):
    """A dataset whose format is unknown or refused (the message names the columns)."""


class FormatGrading:
    """How a format's own project grades a patch, for formats whose grading is not the SWE-bench
    harness's report: the eval script it runs, the statuses it reads from the log, the verdict.

    ``log_parser`` is the swebench parser that reads the same log as pytest nodeids (the
    validation's statuses and the tamper guard's view of the run)."""

    log_parser: ClassVar[str] = "parse_log_pytest"

    def eval_script(self, instance: Instance, spec: EnvSpec | None, activate: str) -> str:
        raise NotImplementedError

    def statuses(self, instance: Instance, log: str) -> tuple[dict[str, str], bool]:
        """test -> status as the validation reads this log (FAIL_TO_PASS / PASS_TO_PASS names),
        and whether the log holds a test run at all."""
        raise NotImplementedError

    def report(self, instance: Instance, log: str) -> dict[str, Any]:
        """The per-instance report entry (``resolved``, ``tests_status`` ...) for this log, as
        the project's own grader computes it."""
        raise NotImplementedError


class DatasetFormat:
    """One dataset format: subclasses set the class attributes and override what differs."""

    name: ClassVar[str]
    required: ClassVar[tuple[str, ...]]  # the columns a row of this format always has
    description: ClassVar[str]
    grading: ClassVar[FormatGrading | None] = None  # None: the SWE-bench harness's reports

    def detect(self, row: Mapping[str, Any]) -> bool:
        """Whether ``row`` is of this format (its columns, and what they hold)."""
        return all(column in row for column in self.required)

    def task_fields(self, row: dict[str, Any]) -> dict[str, Any]:
        """The task record's fields for ``row`` (only those the mapping sets or rewrites);
        RowRefused names what the row lacks."""
        raise NotImplementedError

    def image(self, row: Mapping[str, Any]) -> str | None:
        """The row's prebuilt image, as its project names it (None: the format has none)."""
        return None

    def recipes(self, rows: Iterable[Instance]) -> SpecTable:
        """Container-free environment specs for ``rows`` (empty: none beyond the dataset's)."""
        return SpecTable()

    # -- shared -----------------------------------------------------------------------------
    def to_task(self, row: dict[str, Any]) -> dict[str, Any]:
        """``row`` with the task record's fields set, its own columns kept (see the module)."""
        missing = [c for c in self.required if row.get(c) in (None, "")]
        if missing:
            raise RowRefused(f"{self.name} row without {', '.join(missing)}", missing[0])
        fields = self.task_fields(row)
        image = self.image(row)
        if image and not row.get("image"):
            fields["image"] = image
        out = dict(row)
        rewritten = {k: row[k] for k, v in fields.items() if k in row and row[k] != v}
        out.update(fields)
        out[FORMAT_FIELD] = self.name
        out[COLUMNS_FIELD] = list(row)
        if rewritten:
            out[SOURCE_FIELD] = rewritten
        return out


def source_row(instance: Instance) -> dict[str, Any]:
    """The published row an instance was read from: its own columns, in its order, with the
    values the mapping rewrote put back (test lists as lists, as the record reads them)."""
    row = instance.to_row(lists=True)
    extra = instance.model_extra or {}
    original = extra.get(SOURCE_FIELD) or {}
    columns = extra.get(COLUMNS_FIELD) or [
        k for k in row if k not in (FORMAT_FIELD, SOURCE_FIELD, COLUMNS_FIELD)
    ]
    return {c: original[c] if c in original else row.get(c) for c in columns}


def test_list(value: Any, field: str) -> list[str]:
    """A list of test names from a JSON string, a Python literal (SWE-smith's dumps write
    ``str(list)``), or a list."""
    if isinstance(value, list):
        return [str(v) for v in value]
    if isinstance(value, str):
        for parse in (json.loads, ast.literal_eval):
            try:
                parsed = parse(value)
            except (ValueError, SyntaxError):
                continue
            if isinstance(parsed, list):
                return [str(v) for v in parsed]
    raise RowRefused(f"not a list of test names: {str(value)[:80]!r}", field)


def json_value(value: Any, field: str) -> Any:
    """A column that holds JSON as text (HF datasets) or already parsed (local dumps)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise RowRefused(f"not valid JSON: {exc}", field) from None
    return value
