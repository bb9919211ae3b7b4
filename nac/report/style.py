"""One figure style for every report figure; figures are saved as PNG and SVG."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402

PALETTE = "colorblind"


def setup() -> None:
    sns.set_theme(context="paper", style="whitegrid", palette=PALETTE, font_scale=1.1)
    plt.rcParams.update({"figure.dpi": 110, "savefig.dpi": 150, "savefig.bbox": "tight", "svg.hashsalt": "nac-repro",
                         "svg.fonttype": "none"})


def save(fig, out_dir: str | Path, name: str) -> list[Path]:
    """Save ``fig`` as ``<name>.png`` and ``<name>.svg`` under ``out_dir``; returns the paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.png", out_dir / f"{name}.svg"]
    fig.savefig(paths[0])
    fig.savefig(paths[1], metadata={"Date": None})
    plt.close(fig)
    return paths
