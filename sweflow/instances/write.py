"""Write tasks back out, atomically, in the SWE-bench on-disk convention.

Atomic (a temporary file in the same folder, then a rename) so that a crash or a concurrent
reader never sees half a dataset: the validated dataset is what later stages trust.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

from sweflow.files import write_atomic
from sweflow.instances.record import Instance, InstancesError


def write_jsonl(instances: Iterable[Instance], path: str | Path, *, lists: bool = False) -> Path:
    """One ``to_row(lists=lists)`` per line, ASCII-escaped so that any line reader splits it."""

    def write(fh: IO[bytes]) -> None:
        for inst in instances:
            try:
                line = json.dumps(inst.to_row(lists=lists), default=_json_default)
            except TypeError as exc:
                raise InstancesError(f"{path}: cannot write {inst.instance_id}: {exc}") from None
            fh.write(line.encode() + b"\n")

    return _atomic_write(Path(path), write)


def to_rows(instances: Iterable[Instance], *, lists: bool = False) -> list[dict[str, Any]]:
    """``to_row()`` of each, all with the same columns (null where a row lacks an extra field).

    Table builders (pyarrow, ``datasets.Dataset.from_list``) take their columns from the first
    row and silently drop the others' extra fields: give them these rows.
    """
    rows = [inst.to_row(lists=lists) for inst in instances]
    columns = dict.fromkeys(key for row in rows for key in row)
    return [{key: row.get(key) for key in columns} for row in rows]


def write_parquet(instances: Iterable[Instance], path: str | Path, *, lists: bool = False) -> Path:
    """A parquet file with one column per field; a row without some extra field gets null."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pa.Table.from_pylist(to_rows(instances, lists=lists))
    except pa.ArrowException as exc:
        raise InstancesError(
            f"{path}: cannot write parquet (mixed types in a column?): {exc}"
        ) from None
    return _atomic_write(Path(path), lambda fh: pq.write_table(table, fh))


def _json_default(value: Any) -> str:
    if isinstance(value, dt.date):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} {value!r} is not JSON serializable")


def _atomic_write(path: Path, write: Callable[[IO[bytes]], None]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(path, write)
