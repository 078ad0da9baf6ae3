"""Tasks in: the SWE-bench task record, its loaders and writers.

from sweflow.instances import load_instances, write_jsonl
result = load_instances("SWE-bench/SWE-bench_Lite", "test", instances=["astropy__astropy-12907"])
for err in result.errors: print(err)   # bad rows are reported, the others load
write_jsonl(result.instances, "lite.jsonl")
"""

from __future__ import annotations

from sweflow.instances.load import (
    beside_dataset,
    load_hf_dataset,
    load_instances,
    load_json,
    load_jsonl,
    load_parquet,
    load_task_repo,
)
from sweflow.instances.record import Instance, InstancesError, LoadResult, RowError
from sweflow.instances.write import to_rows, write_jsonl, write_parquet

__all__ = [
    "Instance",
    "InstancesError",
    "LoadResult",
    "RowError",
    "beside_dataset",
    "load_hf_dataset",
    "load_instances",
    "load_json",
    "load_jsonl",
    "load_parquet",
    "load_task_repo",
    "to_rows",
    "write_jsonl",
    "write_parquet",
]
