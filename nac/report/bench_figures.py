"""Figures of timing results: Figure 5b at the paper's size (the ``throughput`` stage) and the image
track's distance to a plateau (the committed ``bench/bench_convergence.py`` results). Each is saved as PNG and SVG."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns

from nac.report.style import legend_outside, save


def figure_5b_paper_size(results: dict, out_dir) -> list[Path]:
    """Figure 5b at the paper's size from the ``throughput`` stage's results: inference
    throughput of the paper-profile NAC (untrained weights) against the fraction of processor
    modules dropped, for the executor alone and the whole model, mean and 95% CI over the timed
    repeats (left), and the speed-up over 0% dropped (right: ratio of means, the band the point's
    CI over the 0% mean). Images per CPU-second where the
    results have them (one thread: the work done, whatever else loads the machine), else per
    wall-clock second."""
    res, machine = results["figure5b_paper_size"], results["machine"]
    rows = sorted(res["rows"], key=lambda r: r["dropped_fraction"])
    clock = "images_per_cpu_s" if "executor_images_per_cpu_s" in rows[0] else "images_per_s"
    unit = "images per CPU-second" if clock == "images_per_cpu_s" else "images/s"
    x = np.array([r["dropped_fraction"] for r in rows])
    fig, (ax, ax_up) = plt.subplots(1, 2, figsize=(10, 4))
    for kind, label in (("executor", "executor (tokens and design given)"), ("whole", "whole model")):
        iv = [r[f"{kind}_{clock}"] for r in rows]
        mean = np.array([v["mean"] for v in iv])
        lo = np.array([v["lo"] if v["lo"] is not None else v["mean"] for v in iv])
        hi = np.array([v["hi"] if v["hi"] is not None else v["mean"] for v in iv])
        (line,) = ax.plot(x, mean, marker="o", ms=3.5, label=label)
        ax.fill_between(x, lo, hi, alpha=0.2, color=line.get_color())
        base = mean[0]
        ax_up.plot(x, mean / base, marker="o", ms=3.5, color=line.get_color(), label=label)
        ax_up.fill_between(x, lo / base, hi / base, alpha=0.2, color=line.get_color())
    ax.set_yscale("log")
    ax.set_xlabel("fraction of processor modules dropped")
    ax.set_ylabel(f"inference throughput ({unit})")
    ax_up.set_xlabel("fraction of processor modules dropped")
    ax_up.set_ylabel("speed-up over 0% dropped")
    ax_up.axhline(1.0, color="grey", lw=0.8)
    legend_outside(ax_up, fontsize=8)
    tok = res.get("tokenizer", {})
    fig.suptitle(
        f"Figure 5b (paper-size model, untrained weights, this CPU): {res['n_processor']} processor modules, "
        f"{tok.get('kind', '')} tokenizer, {res['image_size']} px, batch {res['batch']}, "
        f"{machine['threads']} thread(s), torch {machine['torch']}\n"
        f"profile paper (untrained weights, no seed), mean and 95% CI over {machine['repeats']} timed repeats, "
        f"{machine.get('date', '')}",
        fontsize=9,
        y=1.04,
    )
    return save(fig, out_dir, "figure5b_paper_size_throughput")


def figure_convergence(
    results: dict,
    histories: dict[str, list[list[dict]]],
    labels: dict[str, str],
    out_dir,
    current: bool = True,
    caption: str = "",
) -> list[Path]:
    """How far the profile's image-track training is from a plateau, one panel per model: validation
    Acc@1 per epoch of the longer runs of ``bench/bench_convergence.py`` (the cosine schedule
    stretched to their length; mean over the seeds run at that length), one colour per length,
    beside the pipeline's own runs (black, dashed, ending at the profile's epoch count, marked by the
    vertical line). ``current``: whether the longer runs were trained with this pipeline's settings
    (else their labels and the title say they are an earlier model's)."""
    mini_epochs = results["mini_epochs"]
    runs = list(results["runs"])
    fig, axes = plt.subplots(1, len(runs), figsize=(5.2 * len(runs), 4), sharey=True, squeeze=False)
    colours = sns.color_palette("colorblind", 10)
    which = "longer run" if current else "earlier model"
    for ax, run in zip(axes[0], runs):
        by_len = results["runs"][run]
        for j, (epochs, by_seed) in enumerate(sorted(by_len.items(), key=lambda kv: int(kv[0]))):
            y = np.mean([r["val_acc1"] for r in by_seed.values()], axis=0)
            n = len(by_seed)
            ax.plot(
                range(1, len(y) + 1),
                y,
                marker="os^D"[j % 4],
                ms=2.5,
                color=colours[j % 10],
                label=f"{which}: {epochs} epochs ({n} seed{'s' if n > 1 else ''})",
            )
        own = [h for h in histories.get(run, []) if h]
        if own:
            y = np.mean([[e["val_acc1"] for e in h] for h in own], axis=0)
            ax.plot(
                range(1, len(y) + 1),
                y,
                ls="--",
                marker="s",
                ms=3,
                color="black",
                label=f"this pipeline: {len(y)} epochs ({len(own)} seeds)",
            )
        ax.axvline(mini_epochs, color="grey", lw=0.8, ls=":")
        ax.set(xlabel="epoch", title=labels.get(run, run))
        ax.title.set_fontsize(9)
        ax.legend(fontsize=7, loc="lower right")
    axes[0, 0].set_ylabel("validation Acc@1 (%)")
    earlier = "" if current else "\nthe longer runs: an earlier model (template=nac_v1), not this pipeline's"
    fig.suptitle(
        f"How far {results['profile']} is from a plateau (image track){earlier}\n{caption}", fontsize=9, y=1.08
    )
    return save(fig, out_dir, "convergence")
