"""One figure style for every report figure; figures are saved as PNG and SVG."""

from __future__ import annotations

import zlib
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402

PALETTE = "colorblind"
# One style per series, the same in every figure: the runs in this order take colour i % 10 and marker
# i % 8, so the first 40 series all differ (lcm(10, 8) = 40); a name not listed takes one of the 40 by a
# hash of the name (``_index``): its style never depends on which names were drawn before it.
_ORDER = [
    "perceiver_io",
    "nac",
    "modfc",
    "frozen_graph",
    "nac-scale_free",
    "nac-planted_partition",
    "nac-ring_of_cliques",
    "nac-erdos_renyi",
    "neural_interpreter",
    "modular_network",
    "conditional",
    "text_only",
    "image_only",
]
_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
_STYLES = 40  # lcm(10 colours, 8 markers)


def _index(name: str) -> int:
    """The style index of a series: its place in ``_ORDER``, else ``len(_ORDER)`` plus a stable hash of
    the name (CRC-32, the same in every process, unlike ``hash``) modulo the 40 distinct styles."""
    if name in _ORDER:
        return _ORDER.index(name)
    return len(_ORDER) + zlib.crc32(name.encode("utf-8")) % _STYLES


def setup() -> None:
    sns.set_theme(context="paper", style="whitegrid", palette=PALETTE, font_scale=1.1)
    plt.rcParams.update(
        {
            "figure.dpi": 110,
            "savefig.dpi": 150,
            "savefig.bbox": "tight",
            "svg.hashsalt": "nac-repro",
            "svg.fonttype": "none",
        }
    )


def series_style(run: str) -> dict:
    """``ax.plot`` keywords (colour, marker, line style) of a run, the same in every figure. A control
    of a NAC (``nac-<prior>-noreg``/``-randinit``) has its own colour and line style; a random-order
    control (``<run>|random``) keeps its run's colour, dashed."""
    base, _, suffix = run.partition("|")
    # the controls have their own line style and a colour of their own, never their run's (they share a
    # panel with it); the colours are those of runs that are never drawn beside the image ladder's
    for tag, ls, color in (("-noreg", (0, (5, 2)), 1), ("-randinit", (0, (1, 1.5)), 9)):
        if base.endswith(tag):
            marker = "x" if tag == "-noreg" else "+"
            return {
                **series_style(base[: -len(tag)]),
                "ls": ls,
                "marker": marker,
                "color": sns.color_palette(PALETTE, 10)[color],
            }
    i = _index(base)
    colors = sns.color_palette(PALETTE, 10)
    return {"color": colors[i % 10], "marker": _MARKERS[i % len(_MARKERS)], "ls": "--" if suffix else "-"}


def legend_outside(ax, *handles_labels, **kw) -> None:
    """The legend to the right of the axes, off the data (of ``handles_labels`` if given)."""
    ax.legend(
        *handles_labels,
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        borderaxespad=0.0,
        frameon=False,
        **{"fontsize": 7, **kw},
    )


def save(fig, out_dir: str | Path, name: str) -> list[Path]:
    """Save ``fig`` as ``<name>.png`` and ``<name>.svg`` under ``out_dir``; returns the paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.png", out_dir / f"{name}.svg"]
    fig.savefig(paths[0])
    fig.savefig(paths[1], metadata={"Date": None})
    plt.close(fig)
    return paths
