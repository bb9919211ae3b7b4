"""Tables as pandas DataFrames, written as Markdown and CSV: ours (mean +- 95% CI over seeds)
beside the paper's numbers and the difference."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nac.pipeline.image import summarize
from nac.report.published import RUN_LABELS, TABLE1, TABLE1_COLUMNS

COLUMN_LABELS = {"iid_acc1": "IID Acc@1", "iid_acc5": "IID Acc@5", "ood_acc1": "OOD Acc@1", "ood_acc5": "OOD Acc@5"}


def read_runs(folder: str | Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(Path(folder).glob("*.json"))]


def fmt(mean: float, ci: float, n: int) -> str:
    return f"{mean:.2f}" if n < 2 else f"{mean:.2f} ± {ci:.2f}"


def table1(evals: list[dict[str, Any]], ladder: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Returns (display table, long numeric table). Display: one row per ladder entry; each
    metric cell reads ``ours mean ± 95% CI [paper; ours - paper]``."""
    df = pd.DataFrame(evals)
    display, numeric = [], []
    for run in ladder:
        sub = df[df["run"] == run]
        if sub.empty:
            raise ValueError(f"no evaluation metrics for run {run!r}; did eval_ood@{run}-<seed> run?")
        row = {"model": RUN_LABELS.get(run, run), "seeds": int(len(sub))}
        for i, col in enumerate(TABLE1_COLUMNS):
            s = summarize(sub[col].tolist())
            paper = TABLE1.get(run, (np.nan,) * 4)[i]
            row[COLUMN_LABELS[col]] = f"{fmt(s['mean'], s['ci95'], s['n'])} [{paper:.2f}; {s['mean'] - paper:+.2f}]"
            numeric.append({"run": run, "metric": col, "mean": s["mean"], "ci95": s["ci95"], "n": s["n"], "paper": paper,
                            "diff": s["mean"] - paper})
        display.append(row)
    return pd.DataFrame(display), pd.DataFrame(numeric)


def style_table(evals: list[dict[str, Any]], ladder: list[str]) -> pd.DataFrame | None:
    """OOD Acc@1 per rendition style (mean over seeds), one row per ladder entry."""
    if not evals or "ood_acc1_by_style" not in evals[0]:
        return None
    rows = []
    for run in ladder:
        sub = [e for e in evals if e["run"] == run]
        styles = sub[0]["ood_acc1_by_style"]
        row = {"model": RUN_LABELS.get(run, run)}
        for st in styles:
            s = summarize([e["ood_acc1_by_style"][st] for e in sub])
            row[st] = fmt(s["mean"], s["ci95"], s["n"])
        rows.append(row)
    return pd.DataFrame(rows)


def write_table(df: pd.DataFrame, out_dir: str | Path, name: str) -> str:
    """Write ``<name>.md`` and ``<name>.csv``; returns the Markdown."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    md = df.to_markdown(index=False)
    (out_dir / f"{name}.md").write_text(md + "\n")
    df.to_csv(out_dir / f"{name}.csv", index=False)
    return md
