"""Which tasks a learning run trains and is measured on, in which order, and how many give their
gold file away: the choices ``sweflow bench learn`` makes of a dataset's rows."""

from __future__ import annotations

from sweflow.envcache.dataset import across_repos, in_turn
from sweflow.instances import Instance
from sweflow.synth.leaks import changed_files, gold_file_leaks


def across_operators(rows: list[Instance]) -> list[Instance]:
    """``rows`` taking each synthesis operator in turn, each operator's tasks across projects:
    SFT's first tasks then cover the bug types, not the few of the first projects."""
    return in_turn(across_repos(rows, 0), operator_of)


def operator_of(row: Instance) -> str:
    """The synthesis operator that made ``row`` ('' for a task synthesis did not make)."""
    synth = (row.model_extra or {}).get("synth")
    return str(synth.get("operator", "")) if isinstance(synth, dict) else ""


def leak_rate(rows: list[Instance]) -> float:
    """The share of ``rows`` whose statement names its gold file some way (sweflow.synth.leaks):
    a localisation figure on them measures reading too."""
    leaking = [r for r in rows if gold_file_leaks(r.problem_statement, changed_files(r.patch))]
    return round(len(leaking) / max(len(rows), 1), 3)
