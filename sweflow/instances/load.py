"""Read task rows from JSON, JSONL, parquet, Hugging Face datasets and swebench-5 task repos.

Every loader returns a LoadResult: a bad row becomes a RowError and the other rows still load,
so one malformed instance never costs a whole dataset build. Only a source that cannot be read
at all (missing, not JSON, not parquet) raises InstancesError.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

from sweflow.instances.hub import hub_dataset_folder, parse_hub_name
from sweflow.instances.record import InstancesError, LoadResult, RowError, RowMapper, parse_row

# (source, 0-based index, raw row); readers yield these, or a RowError for a row they could
# not even read, or None for a row they skip on purpose (a task in another split).
Raw = tuple[str, int, Any]
Rows = Iterable[Raw | RowError | None]

# A swebench-5 task repo keeps these columns as files next to task.yaml (as swebench 5's
# swebench.task.repo module writes them).
TASK_FILES = ("task.yaml", "task.yml", "task.json")
AS_FILE = {
    "patch": "gold.patch",
    "test_patch": "test.patch",
    "eval_script": "eval.sh",
    "problem_statement": "problem_statement.md",
    "hints_text": "hints.md",
}
TESTS_FILE = "tests.json"
SAVED_DATASET_FILES = ("dataset_dict.json", "dataset_info.json", "state.json")


def load_instances(
    source: str | Path,
    split: str | None = None,
    *,
    instances: Sequence[str] | None = None,
    mapper: RowMapper | None = None,
) -> LoadResult:
    """Load tasks from whatever ``source`` is, keeping only ``instances`` when given.

    A file is read by its suffix (.json, .jsonl/.ndjson, .parquet). A directory is, in order: a
    dataset saved with ``save_to_disk``; a task repo (``tasks/<id>/task.yaml`` or ``<id>/task.yaml``
    directly); a folder holding ``tasks.jsonl``; else a folder of data files for
    ``datasets.load_dataset`` (``test.parquet``, ``train.jsonl``, ...). Anything else that does
    not exist is a Hugging Face dataset name. ``split`` picks the split of a dataset and the
    tasks of a task repo; plain files have no splits and ignore it.
    """
    path = Path(source).expanduser()
    loaders: dict[str, Callable[..., LoadResult]] = {
        ".json": load_json,
        ".jsonl": load_jsonl,
        ".ndjson": load_jsonl,
        ".parquet": load_parquet,
    }
    if path.is_file():
        loader = loaders.get(path.suffix.lower())
        if loader is None:
            raise InstancesError(
                f"{path}: unknown task file type {path.suffix!r}; use .json, .jsonl or .parquet"
            )
        return loader(path, instances=instances, mapper=mapper)
    if path.is_dir():
        if _saved_dataset(path, split) is not None:
            return load_hf_dataset(path, split, instances=instances, mapper=mapper)
        if _task_dirs(path):
            return load_task_repo(path, split, instances=instances, mapper=mapper)
        if (path / "tasks.jsonl").is_file():
            return load_jsonl(path / "tasks.jsonl", instances=instances, mapper=mapper)
        return load_hf_dataset(path, split, instances=instances, mapper=mapper)
    looks_like_a_path = path.suffix.lower() in loaders or str(source).startswith((".", "/", "~"))
    hub = None if isinstance(source, Path) or looks_like_a_path else parse_hub_name(str(source))
    if hub is None:
        raise InstancesError(f"no such file or directory: {path}")
    if hub.split and split and hub.split != split:
        raise InstancesError(f"{source}: names split {hub.split!r} but split {split!r} is asked")
    result = load_hf_dataset(
        hub_dataset_folder(hub), hub.split or split, instances=instances, mapper=mapper
    )
    # errors name the dataset as given, not the cache folder it was read from
    result.errors = [dataclasses.replace(e, source=str(source)) for e in result.errors]
    return result


def beside_dataset(source: str | Path, name: str) -> Path:
    """Where a dataset keeps ``name`` (``specs.yaml``, ``repos``): inside a dataset folder, beside
    a dataset file."""
    path = Path(source).expanduser()
    return (path if path.is_dir() else path.parent) / name


def load_json(
    path: str | Path, *, instances: Sequence[str] | None = None, mapper: RowMapper | None = None
) -> LoadResult:
    """A JSON list of rows, an object of instance_id -> row, or one row.

    JSON Lines under a .json name (what ``Dataset.to_json`` writes) is read as JSONL.
    """
    text = _read_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":
            return _collect(_jsonl_rows(str(path), text), str(path), instances, mapper)
        raise InstancesError(
            f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}"
        ) from None
    if isinstance(data, dict) and all(isinstance(v, dict) for v in data.values()):
        rows: Rows = (_keyed(str(path), i, k, row) for i, (k, row) in enumerate(data.items()))
    elif isinstance(data, dict | list):
        data = data if isinstance(data, list) else [data]
        rows = ((str(path), i, row) for i, row in enumerate(data))
    else:
        raise InstancesError(f"{path}: expected a list of task rows, got {type(data).__name__}")
    return _collect(rows, str(path), instances, mapper)


def load_jsonl(
    path: str | Path, *, instances: Sequence[str] | None = None, mapper: RowMapper | None = None
) -> LoadResult:
    """One row per line; a line that is not JSON is a RowError naming the line."""
    return _collect(_jsonl_rows(str(path), _read_text(path)), str(path), instances, mapper)


def load_parquet(
    path: str | Path, *, instances: Sequence[str] | None = None, mapper: RowMapper | None = None
) -> LoadResult:
    """A parquet file, one row per task (the HF datasets' own storage format)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not Path(path).is_file():
        raise InstancesError(f"no such file: {path}")
    try:
        data = pq.read_table(path).to_pylist()
    except (OSError, pa.ArrowException) as exc:
        raise InstancesError(f"{path}: not a readable parquet file: {exc}") from None
    rows = ((str(path), i, row) for i, row in enumerate(data))
    return _collect(rows, str(path), instances, mapper)


def load_hf_dataset(
    name: str | Path,
    split: str | None = None,
    *,
    instances: Sequence[str] | None = None,
    mapper: RowMapper | None = None,
) -> LoadResult:
    """A Hugging Face dataset: a hub name, a folder of data files, or a ``save_to_disk`` folder.

    Without ``split``, a dataset with a single split uses it; with several, it is an error
    that lists them (SWE-bench ships ``test``, SWE-smith ``train``: no default fits both).
    """
    import datasets

    saved = _saved_dataset(Path(name), split)
    try:
        if saved is not None:
            ds = datasets.load_from_disk(str(saved))
        else:
            ds = datasets.load_dataset(str(name), split=split)
    except (OSError, ValueError, datasets.exceptions.DatasetsError) as exc:
        what = f"{name!r}" + (f" split {split!r}" if split else "")
        raise InstancesError(f"cannot load dataset {what}: {exc}") from None
    if isinstance(ds, datasets.DatasetDict):
        if split is None and len(ds) == 1:
            split = next(iter(ds))
        if split not in ds:
            raise InstancesError(
                f"dataset {str(name)!r} has splits {', '.join(ds)}: choose one with a split"
            )
        ds = ds[split]
    rows = ((str(name), i, row) for i, row in enumerate(ds))
    return _collect(rows, str(name), instances, mapper)


def load_task_repo(
    path: str | Path,
    split: str | None = None,
    *,
    instances: Sequence[str] | None = None,
    mapper: RowMapper | None = None,
) -> LoadResult:
    """A swebench-5 task repo: ``<path>/tasks/<instance_id>/`` (or ``<path>/<instance_id>/``).

    Each task folder holds ``task.yaml`` (or ``task.json``) with the short fields, and may hold
    ``tests.json`` (FAIL_TO_PASS, PASS_TO_PASS), ``gold.patch``, ``test.patch``, ``eval.sh``,
    ``problem_statement.md`` and ``hints.md``; a file fills its column when task.yaml lacks it.
    instance_id defaults to the folder's name. With ``split``, tasks whose ``split`` field
    names another split are skipped; tasks without one belong to every split.
    """
    if not Path(path).is_dir():
        raise InstancesError(f"no such directory: {path}")
    dirs = _task_dirs(Path(path))
    if not dirs:
        raise InstancesError(f"{path}: no task folders (tasks/<instance_id>/task.yaml) found")
    rows = (_task_row(d, i, split) for i, d in enumerate(dirs))
    return _collect(rows, str(path), instances, mapper)


def _read_text(path: str | Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InstancesError(f"no such file: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InstancesError(f"{path}: cannot read: {exc}") from None


def _jsonl_rows(source: str, text: str) -> Rows:
    index = 0
    # split on "\n" only: JSON text may hold U+2028 and friends, which splitlines() breaks on
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            yield source, index, json.loads(line)
        except json.JSONDecodeError as exc:
            msg = f"line {lineno}, column {exc.colno}: not valid JSON: {exc.msg}"
            yield RowError(source, index, None, None, msg)
        index += 1


def _keyed(source: str, index: int, key: str, row: Any) -> Raw | RowError:
    """A row stored under its instance_id (a JSON object's key, a task folder's name)."""
    if not isinstance(row, dict):
        return source, index, row  # parse_row reports it
    if "instance_id" not in row:
        return source, index, {"instance_id": key, **row}
    if row["instance_id"] != key:
        msg = f"is {row['instance_id']!r} but the row is stored under {key!r}"
        return RowError(source, index, key, "instance_id", msg)
    return source, index, row


def _saved_dataset(path: Path, split: str | None) -> Path | None:
    """The folder to give load_from_disk, if ``path`` (or ``path/split``) was saved by datasets."""
    for folder in (path, path / split) if split else (path,):
        if any((folder / name).is_file() for name in SAVED_DATASET_FILES):
            return folder
    return None


def _task_file(folder: Path) -> Path | None:
    return next((folder / n for n in TASK_FILES if (folder / n).is_file()), None)


def _task_dirs(path: Path) -> list[Path]:
    root = path / "tasks" if (path / "tasks").is_dir() else path
    return sorted(d for d in root.iterdir() if d.is_dir() and _task_file(d))


def _task_row(folder: Path, index: int, split: str | None) -> Raw | RowError | None:
    source = str(folder)

    def error(message: str, field: str | None = None) -> RowError:
        return RowError(source, index, folder.name, field, message)

    meta_path = _task_file(folder)
    assert meta_path is not None  # _task_dirs keeps only folders that have one
    try:
        text = meta_path.read_text(encoding="utf-8")
        if meta_path.suffix == ".json":
            meta = json.loads(text)
        else:
            meta = yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        return error(f"{meta_path.name}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}")
    except yaml.YAMLError as exc:
        return error(f"{meta_path.name} is not valid YAML: {exc}")
    except (OSError, UnicodeDecodeError) as exc:
        return error(f"cannot read {meta_path.name}: {exc}")
    if not isinstance(meta, dict):
        return error(f"{meta_path.name} must hold a mapping, got {type(meta).__name__}")
    if split is not None and meta.get("split", split) != split:
        return None
    try:
        for column, name in AS_FILE.items():
            if column not in meta and (folder / name).is_file():
                # newline="" so that CRLF inside a patch survives verbatim
                with open(folder / name, encoding="utf-8", newline="") as fh:
                    meta[column] = fh.read()
        if (folder / TESTS_FILE).is_file():
            tests = json.loads((folder / TESTS_FILE).read_text(encoding="utf-8"))
            if not isinstance(tests, dict):
                return error(f"{TESTS_FILE} must hold an object with FAIL_TO_PASS, PASS_TO_PASS")
            for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
                if key in tests:
                    meta.setdefault(key, tests[key])
    except json.JSONDecodeError as exc:
        return error(f"{TESTS_FILE}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}")
    except (OSError, UnicodeDecodeError) as exc:
        return error(f"cannot read a task file: {exc}")
    return _keyed(source, index, folder.name, meta)


def _collect(
    rows: Rows, source: str, wanted: Sequence[str] | None, mapper: RowMapper | None = None
) -> LoadResult:
    """Parse rows, drop duplicates (the first wins), and keep only the ``wanted`` ids.

    With ``wanted``, errors of rows whose id is readable and not wanted are dropped (they do
    not concern this run); errors of rows without a readable id stay, since they might.
    """
    result = LoadResult()
    first: dict[str, int] = {}
    for item in rows:
        if item is None:
            continue
        if isinstance(item, RowError):
            result.errors.append(item)
            continue
        src, index, raw = item
        parsed = parse_row(raw, src, index, mapper)
        if isinstance(parsed, list):
            result.errors.extend(parsed)
        elif parsed.instance_id in first:
            msg = f"duplicate of row {first[parsed.instance_id]}; the first one is kept"
            result.errors.append(RowError(src, index, parsed.instance_id, "instance_id", msg))
        else:
            first[parsed.instance_id] = index
            result.instances.append(parsed)
    if wanted is None:
        return result
    want = dict.fromkeys([wanted] if isinstance(wanted, str) else wanted)  # one id, not chars
    seen = set(first) | {e.instance_id for e in result.errors}
    result.instances = [i for i in result.instances if i.instance_id in want]
    result.errors = [e for e in result.errors if e.instance_id is None or e.instance_id in want]
    result.errors += [
        RowError(source, None, iid, "instance_id", "requested, but no row has this id")
        for iid in want
        if iid not in seen
    ]
    return result
