"""Predictions in the harness's formats: a JSON list or {id: prediction}, JSONL, or ``gold``.

A prediction is ``{"instance_id", "model_patch", "model_name_or_path"}``. Each bad row (not an
object, a missing or mistyped field, an instance the dataset lacks, a second prediction for one
instance) is reported by row and field, and the other rows go on.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from sweflow.errors import SweflowError
from sweflow.instances import Instance
from sweflow.paths import name_problem

GOLD = "gold"


class PredictionsError(SweflowError):
    """A predictions file that cannot be read at all."""


@dataclass(frozen=True)
class Prediction:
    instance_id: str
    model_patch: str | None
    model_name_or_path: str

    def to_row(self) -> dict:
        return asdict(self)


@dataclass
class Predictions:
    items: list[Prediction]
    errors: list[str]


def gold_predictions(instances: list[Instance]) -> list[Prediction]:
    """The dataset's own patches, as the harness's ``--predictions_path gold`` makes them."""
    return [Prediction(i.instance_id, i.patch, GOLD) for i in instances]


def load_predictions(source: str | Path, instances: list[Instance]) -> Predictions:
    """Read ``source`` (a path or ``gold``), keeping the rows about ``instances``."""
    if str(source) == GOLD:
        return Predictions(gold_predictions(instances), [])
    path = Path(source)
    rows = _raw_rows(path)
    known = {i.instance_id for i in instances}
    items: list[Prediction] = []
    errors: list[str] = []
    seen: set[str] = set()
    for index, row in rows:
        where = f"{path.name}: row {index}"
        problem = _problem(row, known, seen)
        if problem:
            errors.append(f"{where}: {problem}")
            continue
        seen.add(row["instance_id"])
        items.append(Prediction(row["instance_id"], row["model_patch"], row["model_name_or_path"]))
    return Predictions(items, errors)


def _raw_rows(path: Path) -> list[tuple[int, object]]:
    """(0-based row index, parsed row or the line's error text) of a .json or .jsonl file."""
    if path.suffix not in (".json", ".jsonl"):
        raise PredictionsError(f"predictions must be .json, .jsonl or 'gold', not {path}")
    try:
        text = path.read_text()
    except OSError as exc:
        raise PredictionsError(f"cannot read predictions {path}: {exc.strerror or exc}") from exc
    if path.suffix == ".jsonl":
        rows: list[tuple[int, object]] = []
        for index, line in enumerate(text.splitlines()):
            if not line.strip():
                continue
            try:
                rows.append((index, json.loads(line)))
            except json.JSONDecodeError as exc:
                rows.append((index, _BadJson(str(exc))))
        return rows
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PredictionsError(f"predictions {path} are not valid JSON: {exc}") from exc
    if isinstance(data, dict):  # {instance_id: prediction}, as SWE-agent writes them
        data = list(data.values())
    if not isinstance(data, list):
        raise PredictionsError(f"predictions {path}: expected a list or an object of predictions")
    return list(enumerate(data))


@dataclass(frozen=True)
class _BadJson:
    message: str


def _problem(row: object, known: set[str], seen: set[str]) -> str | None:
    """What is wrong with one row, naming the field; None when it is usable."""
    if isinstance(row, _BadJson):
        return f"not valid JSON: {row.message}"
    if not isinstance(row, dict):
        return f"expected an object, got {type(row).__name__}"
    for name, types in (
        ("instance_id", (str,)),
        ("model_name_or_path", (str,)),
        ("model_patch", (str, type(None))),
    ):
        if name not in row:
            return f"{name}: missing"
        if not isinstance(row[name], types):
            return (
                f"{name}: expected {' or '.join(t.__name__ for t in types)}, got {row[name]!r:.60}"
            )
    # swebench names the model's folder with "/" as "__"
    if problem := name_problem(row["model_name_or_path"].replace("/", "__")):
        return f"model_name_or_path: {problem}"
    iid = row["instance_id"]
    if iid not in known:
        return f"instance_id: {iid} is not in the dataset"
    if iid in seen:
        return f"instance_id: a second prediction for {iid}"
    return None
