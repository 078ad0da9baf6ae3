"""The dataset formats by name, as sandbox backends and executors are registered: a built-in
name or a dotted path ``pkg.mod:Attr`` naming a :class:`DatasetFormat` instance.

A row's format is named (``--format``, ``dataset.format``) or detected from its columns, the
formats tried in ``DETECTION_ORDER`` (the most specific first: an R2E-Gym row also has no
``instance_id``, a SWE-rebench row has every SWE-bench column and more).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

from sweflow.formats.base import FORMAT_FIELD, DatasetFormat, FormatError, FormatGrading
from sweflow.harness.specs import SpecTable
from sweflow.instances import Instance
from sweflow.instances.record import RowMapper, RowRefused
from sweflow.registered import check_named, choices_help, load_named, registered_name

FORMATS = {
    "swebench": "sweflow.formats.swebench:FORMAT",
    "swe-gym": "sweflow.formats.swegym:FORMAT",
    "swe-smith": "sweflow.formats.swesmith:FORMAT",
    "r2e-gym": "sweflow.formats.r2egym:FORMAT",
    "swe-rebench": "sweflow.formats.swerebench:FORMAT",
    "sweflow": "sweflow.formats.native:FORMAT",
}
DETECTION_ORDER = ("r2e-gym", "swe-smith", "swe-rebench", "swe-gym", "swebench", "sweflow")
AUTO = "auto"


def check_format_name(name: str) -> str:
    """``name`` if it names a format (``auto``, a built-in, or a dotted path); imports nothing."""
    return name if name == AUTO else check_named("dataset format", name, FORMATS, FormatError)


FormatName = registered_name(
    check_format_name, lambda: {"examples": [AUTO, *FORMATS, "mypackage.formats:FORMAT"]}
)


@functools.cache
def get_format(name: str) -> DatasetFormat:
    """The format ``name`` names (FormatError naming the choices when none)."""
    found = load_named("dataset format", name, FORMATS, FormatError)
    if not isinstance(found, DatasetFormat):
        raise FormatError(
            f"dataset format {name!r} is a {type(found).__name__}, not a DatasetFormat"
        )
    return found


def detect_format(row: Mapping[str, Any]) -> DatasetFormat:
    """The first format of ``DETECTION_ORDER`` whose columns ``row`` has (sweflow's own for a
    row with some of the task record's columns, whose check then names what is wrong);
    RowRefused naming the row's columns and each format's required ones when none fits."""
    for name in DETECTION_ORDER:
        fmt = get_format(name)
        if fmt.detect(row):
            return fmt
    if set(row) & set(Instance.model_fields):  # a task record with fields wrong or missing:
        return get_format("sweflow")  # the record's own check names them
    needs = "; ".join(f"{n}: {', '.join(get_format(n).required)}" for n in DETECTION_ORDER)
    raise RowRefused(
        f"a row of no known format; it has columns {', '.join(sorted(row)) or 'none'}, and the "
        f"formats need {needs} (or name one with --format / dataset.format)"
    )


def row_mapper(name: str = AUTO) -> RowMapper:
    """The mapping of raw rows to task records for format ``name`` (``auto``: each row's own).
    A row already mapped (read back from a stage's output) passes as it is."""
    fixed = None if name == AUTO else get_format(check_format_name(name))

    def mapper(row: dict[str, Any]) -> dict[str, Any]:
        if row.get(FORMAT_FIELD) in FORMATS:
            return row
        fmt = fixed or detect_format(row)
        missing = [c for c in fmt.required if c not in row]
        if missing:  # a named format: its columns must be there (what they hold, to_task checks)
            raise RowRefused(
                f"named format {fmt.name}, but a row without {', '.join(missing)} (it has "
                f"columns {', '.join(sorted(row))})"
            )
        return fmt.to_task(row)

    return mapper


def format_of(instance: Instance) -> DatasetFormat:
    """The format a task record was read as (``sweflow``, the record itself, when none)."""
    name = (instance.model_extra or {}).get(FORMAT_FIELD) or "sweflow"
    return get_format(name)


def grading_of(instance: Instance) -> FormatGrading | None:
    """The instance's own project's grading, when it is not the SWE-bench harness's."""
    return format_of(instance).grading


def recipes_for(rows: Iterable[Instance]) -> SpecTable:
    """The container-free environment specs the rows' formats give (merged, per format)."""
    rows = list(rows)
    table = SpecTable()
    for name in dict.fromkeys((r.model_extra or {}).get(FORMAT_FIELD) or "sweflow" for r in rows):
        fmt = get_format(name)
        table = table.merge(fmt.recipes(r for r in rows if format_of(r) is fmt))
    return table


def formats_help() -> str:
    """One line for option help: the choices."""
    return f"{AUTO} (detect from the columns) | {choices_help(FORMATS)}"


def describe_formats() -> list[tuple[str, str, tuple[str, ...]]]:
    """(name, what it is, required columns) of every built-in format."""
    return [(n, get_format(n).description, get_format(n).required) for n in FORMATS]
