"""bench learn's plots: the dev split's rates per model, and the RL check before and after, per
task and pooled."""

from __future__ import annotations

import textwrap
from pathlib import Path

from sweflow.agent.runs.scores import FUNNEL


def learn_plots(report: dict, out: Path) -> list[str]:
    """Held-out rates per model, and the RL check before/after, as PNGs in the run folder."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = ["valid_action_rate", *(f"{name}_rate" for name in FUNNEL)]
    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 4.5), width_ratios=[3, 1])
    ran_rl = "note" not in report["rl_overfit"]  # else "rl" repeats the SFT model's figures
    models = {name: r for name, r in report["dev"].items() if name != "rl" or ran_rl}
    width = 0.8 / len(models)
    for i, (model, rates) in enumerate(models.items()):
        xs = [x + (i - (len(models) - 1) / 2) * width for x in range(len(names))]
        left.bar(xs, [rates.get(n, 0) for n in names], width, label=model)
    left.set_xticks(range(len(names)), [n.removesuffix("_rate") for n in names], rotation=20)
    left.set_ylim(0, 1)
    left.set_title(f"dev tasks ({report['heldout_tasks']}): {' vs '.join(models)}")
    left.legend()
    _rl_check(right, report["rl_overfit"])
    fig.tight_layout()
    path = out / "learn.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [str(path)]


def _rl_check(axes, overfit: dict) -> None:
    """Each RL task's resolve rate before and after, and their mean: a pooled gain carried by one
    task shows as such. Where RL did not run, the reason instead of empty bars."""
    if "note" in overfit:
        why = textwrap.fill(overfit["note"], 30)
        axes.text(0.5, 0.5, why, ha="center", va="center", transform=axes.transAxes)
        axes.set_axis_off()
        axes.set_title("RL check")
        return
    rows = [(t["instance_id"].split("__")[-1], t) for t in overfit["tasks"]]
    if len(rows) > 1:
        rows.append(("pooled", overfit))
    xs = range(len(rows))
    for offset, when, color in ((-0.2, "before", "tab:orange"), (0.2, "after", "tab:green")):
        values = [figures.get(f"resolve_{when}") or 0 for _, figures in rows]
        label = "SFT (before)" if when == "before" else "SFT+RL (after)"
        axes.bar([x + offset for x in xs], values, 0.4, color=color, label=label)
    labels = [
        f"{name}\n{f.get('resolved_before') or ''}\n{f.get('resolved_after') or ''}"
        for name, f in rows
    ]
    axes.set_xticks(list(xs), labels, fontsize=7)
    axes.set_ylim(0, 1)
    axes.legend(fontsize=7)
    tasks = len(overfit["tasks"])
    axes.set_title(
        f"RL check: resolve rate\n({tasks} task{'s' * (tasks != 1)}, "
        f"{overfit['samples_per_task']} samples each side)"
    )
