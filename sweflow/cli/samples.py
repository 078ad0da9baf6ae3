"""``sweflow infer --samples N``'s options: how the samples are drawn and graded, which
selectors pick among them, and the table of pass@k, best-of-n and oracle pass@N."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from sweflow.cli.common import console, positive
from sweflow.cli.datasets import CliError
from sweflow.errors import SweflowError

if TYPE_CHECKING:
    from sweflow.agent import ModelConfig
    from sweflow.agent.runs.samples import Sampling
    from sweflow.agent.runs.tts import Selection
    from sweflow.harness.specs import SpecTable

ALL_SELECTORS = "first,majority,tests,verifier"


def _selector_list(value: str) -> str:
    from sweflow.agent.runs.selectors import check_selector_name

    names = [name.strip() for name in value.split(",") if name.strip()]
    if not names:
        raise typer.BadParameter("name at least one selector")
    for name in names:
        try:
            check_selector_name(name)
        except SweflowError as exc:  # the registry's message: the name and the choices
            raise typer.BadParameter(str(exc)) from None
    return ",".join(names)


def _non_negative_int(value: int) -> int:
    if value < 0:
        raise typer.BadParameter(f"must be 0 or more, got {value}")
    return value


def _option(default: object, *decls: str, **kwargs: object) -> Any:
    """A field of an option group: its typer.Option (sweflow.cli.common.option_group)."""
    return field(metadata={"option": typer.Option(default, *decls, **kwargs)})


@dataclass(frozen=True)
class SampleArgs:
    """The sampling options of ``infer``."""

    samples: int = _option(
        1,
        "--samples",
        "-n",
        help="Samples per task; above 1 each is graded, selectors pick one per task, and "
        "OUT/samples.json reports pass@k, best-of-n and oracle pass@N.",
        callback=positive,
    )
    seed: int = _option(
        0,
        "--seed",
        help="Base seed: sample k is drawn with a seed derived from it and k.",
        callback=_non_negative_int,
    )
    selectors: str = _option(
        ALL_SELECTORS,
        "--selectors",
        help="Comma-separated selectors run on the samples (a registered name or a dotted "
        "path module:Class).",
        callback=_selector_list,
    )
    predict: str = _option("first", "--predict", help="The selector whose picks become preds.json.")
    verifier_url: str | None = _option(
        None,
        "--verifier-url",
        help="The verifier selector's endpoint (default: the agent's, --model-url).",
    )
    verifier_model: str | None = _option(
        None, "--verifier-model", help="The verifier's model name (default: --model)."
    )
    graders: int = _option(
        2, "--graders", help="Gradings at once (they run test suites).", callback=positive
    )
    tamper_guard: bool = _option(
        True,
        "--tamper-guard/--no-tamper-guard",
        help="Samples whose patch passes the tests without fixing anything count as unresolved.",
    )

    def names(self) -> list[str]:
        return self.selectors.split(",")

    def check(self, model: ModelConfig, out: Path) -> Sampling | None:
        """The sampling of N > 1 samples (None for one), checked against the folder's saved
        samples and the selectors, before any work."""
        from sweflow.agent.runs.samples import Sampling, check_saved

        if self.samples == 1:
            return None
        if self.predict not in self.names():
            raise CliError(f"--predict {self.predict}: not among --selectors {self.selectors}")
        sampling = Sampling(temperature=model.temperature, seed=self.seed)
        check_saved(out, sampling)
        if model.temperature == 0:
            console.print(
                f"[yellow]warning:[/] {self.samples} samples at temperature 0 (greedy) differ "
                "only where the server is not deterministic; give --temperature",
                highlight=False,
            )
        return sampling

    def selection(
        self, model: ModelConfig, store: Path, backend: str, specs: SpecTable
    ) -> Selection:
        from sweflow.agent.runs.selectors import SelectorContext
        from sweflow.agent.runs.tts import Selection

        verifier = model.model_copy(
            update={
                "base_url": self.verifier_url or model.base_url,
                "model": self.verifier_model or model.model,
            }
        )
        context = SelectorContext(store=store, backend=backend, specs=specs, verifier=verifier)
        return Selection(self.names(), self.predict, context)


def print_samples(path: Path) -> None:
    """samples.json as a table: pass@k, best-of-N per selector, oracle pass@N."""
    from sweflow.agent.runs.passk import report_rows
    from sweflow.agent.runs.tts import load_report

    report = load_report(path)
    table = Table(title=f"{report.samples} samples of {report.tasks} task(s)")
    for column in ("figure", "rate", "counts"):
        table.add_column(column, justify="left" if column != "rate" else "right")
    for row in report_rows(report):
        table.add_row(*row)
    console.print(table)
    if report.ungraded:
        console.print(f"{report.ungraded} sample(s) without a verdict (left out)", highlight=False)
