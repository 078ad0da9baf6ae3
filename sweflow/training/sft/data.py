"""SFT data: ``sft.jsonl`` (OpenAI messages + tools, from collect) to tokenized sequences.

Nothing is dropped silently: a line that is not a usable record is named by its line number and
skipped, a conversation longer than ``max_seq_len`` is truncated or skipped (the config says
which), one whose tokens would drift from what the served model receives is skipped; each is
counted in the :class:`DataReport`. Tasks are held out whole (every run of an instance goes to
the same side), chosen by a seeded hash so the split is the same on every machine.

The seed also orders the training sequences: torchtune's recipes shuffle with a sampler whose
seed is fixed at 0, so the config's seed alone never changed which sequences a capped epoch
(``max_steps_per_epoch``) trains, or their order. Seed 0 keeps the data's order; another seed
permutes the sequences first, so another seed is another sample of the fine-tune.

A capped epoch trains a sample of sequences: parts of conversations, a task's edit without the
steps that led to it. ``max_sequences`` caps by whole conversations instead (taken in the seed's
order while all their sequences fit), so that several epochs show a model every step of the same
tasks several times: one pass does not teach a 135M model an edit's exact text.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sweflow.errors import ConfigError
from sweflow.training.chat import ActionsLostError, ChatEncoder, ChatTemplateError, DriftError
from sweflow.training.sft.windows import IGNORE, last_turns, split_windows

TRAIN_FILE = "train.jsonl"  # the tokenized sequences torchtune's dataset reads


def data_dir(work_dir: Path) -> Path:
    """Where an SFT work folder keeps its data: the mix, and the tokenized sequences."""
    return work_dir / "data"


class SFTDataError(ConfigError):
    """No usable training data; the message says why and what to do."""


@dataclass
class DataReport:
    """What became of each line of the data (for the stage's table and the model card)."""

    lines: int = 0
    examples: int = 0  # the train split's; tokens and trained_tokens are counted on it alone
    heldout_examples: int = 0
    malformed: list[str] = field(default_factory=list)  # "line N: why"
    truncated: int = 0  # cut to their start and last turns (overlength: truncate)
    split: int = 0  # made into several windows (overlength: split)
    dropped_turns: int = 0  # assistant turns too long for a sequence even alone (split)
    skipped_overlength: int = 0
    skipped_drift: int = 0
    skipped_untrained: int = 0
    left_out: int = 0  # conversations beyond max_sequences
    tokens: int = 0
    trained_tokens: int = 0
    sources: dict[str, int] = field(default_factory=dict)
    instances: list[str] = field(default_factory=list)  # the tasks the train split holds
    drift_by_dataset: dict[str, int] = field(default_factory=dict)  # skipped_drift per --data

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Example:
    instance_id: str
    tokens: list[int]
    labels: list[int]

    def to_json(self) -> str:
        return json.dumps(
            {"instance_id": self.instance_id, "tokens": self.tokens, "labels": self.labels}
        )


def read_records(path: Path, report: DataReport) -> list[dict[str, Any]]:
    """The usable records of a JSONL file; bad lines are named in ``report.malformed``."""
    records = []
    with path.open() as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            report.lines += 1
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                report.malformed.append(f"line {number}: not JSON ({exc.msg})")
                continue
            if why := record_problem(record):
                report.malformed.append(f"line {number}: {why}")
                continue
            records.append(record)
    return records


def record_problem(record: Any) -> str | None:
    """What makes a line no conversation to train on, naming the message; None if it is one."""
    if not isinstance(record, dict):
        return "not a JSON object"
    messages = record.get("messages")
    if not isinstance(messages, list) or not messages:
        return "no messages"
    for number, message in enumerate(messages, 1):
        if why := _message_problem(message):
            return f"message {number} {why}"
    if not any(m["role"] == "assistant" for m in messages):
        return "no assistant turn to learn from"
    tools = record.get("tools")
    if tools is not None and not isinstance(tools, list):
        return "tools is not a list"
    return None


def _message_problem(message: Any) -> str | None:
    """A message the chat template cannot render as the served model sees it: no role, or no
    text (null content is the OpenAI form only of an assistant turn that calls tools); or a
    ``weight`` other than OpenAI's 0 or 1 on an assistant turn."""
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        return "has no role"
    role, content = message["role"], message.get("content")
    if "weight" in message and (role != "assistant" or message["weight"] not in (0, 1)):
        return f"({role}) has weight {message['weight']!r}: only an assistant turn's, 0 or 1"
    if isinstance(content, str):
        return None
    if content is None and role == "assistant" and message.get("tool_calls"):
        return None
    if content is None:
        return f"({role}) has null content"
    return f"({role}) has {type(content).__name__} content, not text"


def is_heldout(instance_id: str, fraction: float, seed: int) -> bool:
    """Whether a task is held out: a seeded hash below ``fraction`` (same on every machine)."""
    if fraction <= 0:
        return False
    digest = hashlib.sha256(f"{seed}:{instance_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def tokenize_records(
    records: list[dict[str, Any]],
    encoder: ChatEncoder,
    max_seq_len: int,
    overlength: str,
    report: DataReport,
) -> list[Example]:
    examples = []
    for record in records:
        try:
            encoded = encoder.encode(record["messages"], record.get("tools"))
        except ActionsLostError:
            raise  # the data's tool mode is wrong for this model: no conversation would train
        except (DriftError, ChatTemplateError) as exc:
            report.skipped_drift += 1
            report.malformed.append(f"{record.get('instance_id', '?')}: {exc}")
            dataset = str(record.get("dataset", ""))
            report.drift_by_dataset[dataset] = report.drift_by_dataset.get(dataset, 0) + 1
            continue
        sequences = [(encoded.tokens, _labels(encoded.tokens, encoded.trained))]
        if len(encoded.tokens) > max_seq_len:
            sequences = _fitted(record, encoder, max_seq_len, overlength, report)
            if not sequences:
                report.skipped_overlength += 1
                continue
        sequences = [(t, labels) for t, labels in sequences if any(x != IGNORE for x in labels)]
        if not sequences:
            report.skipped_untrained += 1
            continue
        source = str(record.get("source", "model"))
        report.sources[source] = report.sources.get(source, 0) + 1
        for tokens, labels in sequences:
            examples.append(Example(str(record.get("instance_id", "")), tokens, labels))
    return examples


def _labels(tokens: list[int], trained: list[bool]) -> list[int]:
    return [t if keep else IGNORE for t, keep in zip(tokens, trained, strict=True)]


def _fitted(
    record: dict[str, Any],
    encoder: ChatEncoder,
    max_seq_len: int,
    overlength: str,
    report: DataReport,
) -> list[tuple[list[int], list[int]]]:
    """A conversation over ``max_seq_len`` as sequences that fit (sweflow.training.sft.windows),
    or none (skipped)."""
    messages, tools = record["messages"], record.get("tools")
    if overlength == "split":
        windows, dropped = split_windows(messages, tools, encoder, max_seq_len)
        report.split += bool(windows)
        report.dropped_turns += dropped
        return windows
    if overlength == "truncate" and (cut := last_turns(messages, tools, encoder, max_seq_len)):
        report.truncated += 1
        return [(cut.tokens, _labels(cut.tokens, cut.trained))]
    return []


def prepare(
    data: Path,
    encoder: ChatEncoder,
    out_dir: Path,
    *,
    max_seq_len: int,
    overlength: str,
    heldout_fraction: float = 0.0,
    seed: int = 0,
    max_sequences: int | None = None,
) -> tuple[Path, Path | None, DataReport]:
    """Tokenize ``data`` into ``out_dir``/train.jsonl (+ heldout.jsonl); the report says what
    became of every line. Raises SFTDataError when nothing is left to train on."""
    report = DataReport()
    if not data.is_file():
        raise SFTDataError(f"no SFT data at {data}")
    records = read_records(data, report)
    if not report.lines:
        raise SFTDataError(
            f"{data} has no resolved trajectories to train on (it is empty). Collect with a "
            "stronger teacher (collect.teacher: endpoint) or with the gold patches replayed "
            "through the agent's tools (collect.teacher: replay)."
        )
    if not records:
        raise SFTDataError(
            f"{data}: none of its {report.lines} lines is a conversation to train on: "
            f"{_first(report.malformed)}"
        )
    examples = tokenize_records(records, encoder, max_seq_len, overlength, report)
    held = [e for e in examples if is_heldout(e.instance_id, heldout_fraction, seed)]
    train = [e for e in examples if not is_heldout(e.instance_id, heldout_fraction, seed)]
    if max_sequences:
        train, report.left_out = whole_conversations(train, max_sequences, seed)
    if seed:
        random.Random(seed).shuffle(train)
    if not train:
        raise SFTDataError(
            f"{data}: none of its {len(records)} conversations is left to train on"
            + _why_none_left(report, len(held), max_seq_len)
        )
    report.examples, report.heldout_examples = len(train), len(held)
    report.tokens = sum(len(e.tokens) for e in train)  # what a step's throughput is made of
    report.trained_tokens = sum(label != IGNORE for e in train for label in e.labels)
    report.instances = sorted({e.instance_id for e in train})
    out_dir.mkdir(parents=True, exist_ok=True)
    train_path = _write(out_dir / TRAIN_FILE, train)
    heldout_path = _write(out_dir / "heldout.jsonl", held) if held else None
    return train_path, heldout_path, report


def whole_conversations(
    examples: list[Example], budget: int, seed: int
) -> tuple[list[Example], int]:
    """The sequences of whole conversations (a task's windows; its runs, when it has several),
    taken in the seed's order (0: the data's) while they fit in ``budget`` sequences, and how
    many conversations were left out."""
    tasks: dict[str, list[Example]] = {}
    for example in examples:
        tasks.setdefault(example.instance_id, []).append(example)
    order = list(tasks)
    if seed:
        random.Random(seed).shuffle(order)
    taken: list[Example] = []
    for instance in order:
        if len(taken) + len(tasks[instance]) <= budget:
            taken += tasks[instance]
    return taken, len(tasks) - len({e.instance_id for e in taken})


def _first(problems: list[str], shown: int = 3) -> str:
    """The first few of ``problems``, and how many more there are."""
    more = len(problems) - shown
    return "; ".join(problems[:shown]) + (f" (and {more} more)" if more > 0 else "")


def _why_none_left(report: DataReport, held: int, max_seq_len: int) -> str:
    """What took each conversation out, with the setting to change for each cause."""
    causes = []
    if report.skipped_overlength:
        causes.append(
            f"{report.skipped_overlength} over max_seq_len {max_seq_len} (raise sft.max_seq_len)"
        )
    if held:
        causes.append(f"{held} held out (lower sft.heldout_fraction)")
    if report.left_out:
        causes.append(f"{report.left_out} with more sequences than sft.max_sequences (raise it)")
    if report.skipped_drift:
        causes.append(
            f"{report.skipped_drift} not renderable as served: {_first(report.malformed)}"
        )
    if report.skipped_untrained:
        causes.append(f"{report.skipped_untrained} with no assistant token left to train")
    return ": " + "; ".join(causes) if causes else ""


def _write(path: Path, examples: list[Example]) -> Path:
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(e.to_json() + "\n" for e in examples))
    tmp.replace(path)
    return path


def load_examples(path: Path) -> list[Example]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [Example(r["instance_id"], r["tokens"], r["labels"]) for r in rows]
