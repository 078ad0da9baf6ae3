"""bench learn's plots: the dev split's rates per model, and the RL check before and after."""

from __future__ import annotations

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
    overfit = report["rl_overfit"]
    values = [overfit.get("resolve_before") or 0, overfit.get("resolve_after") or 0]
    labels = [
        f"{name}\n{overfit.get(f'resolved_{when}') or ''}"
        for name, when in (("SFT", "before"), ("SFT+RL", "after"))
    ]
    right.bar(labels, values, color=["tab:orange", "tab:green"])
    right.set_ylim(0, 1)
    tasks = len(overfit["tasks"])
    right.set_title(
        f"RL check: resolve rate\n({tasks} task{'s' * (tasks != 1)}, "
        f"{overfit['samples_per_task']} samples each)"
    )
    fig.tight_layout()
    path = out / "learn.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [str(path)]
