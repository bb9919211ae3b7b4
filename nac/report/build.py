"""Build reports/ from metrics/: tables (Markdown + CSV), figures (PNG + SVG) and the index
README. Only the runs and seeds named in params.yaml are read, so stale metrics of runs no
longer configured never leak into a table."""
from __future__ import annotations

import datetime as dt
import json
import platform
import subprocess
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from nac.pipeline.image import checkpoint_path, parse_run
from nac.pipeline.params import write_json
from nac.report import figures, tables
from nac.report.published import RUN_LABELS
from nac.report.style import setup


def _provenance(params: dict) -> dict[str, str]:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "nac", "stages", "conf", "dvc.yaml"],
                               capture_output=True, text=True).stdout.strip()
        commit += " (with uncommitted code changes)" if dirty else ""
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown (not a git checkout)"
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU ({platform.machine()}, {torch.get_num_threads()} threads)"
    return {"profile": params["profile"], "commit": commit, "date": dt.date.today().isoformat(),
            "machine": f"{platform.node() or 'unknown host'}, {device}", "torch": torch.__version__}


def _select(rows: list[dict], runs: list[str], seeds: list[int]) -> list[dict]:
    return [r for r in rows if r["run"] in runs and r["seed"] in seeds]


def build_image_report(params: dict, out: str | Path = "reports", metrics: str | Path = "metrics") -> dict[str, Any]:
    from nac.checkpoint import load_model

    setup()
    out, metrics = Path(out), Path(metrics)
    ladder, seeds = params["image"]["ladder"], params["seeds"]
    evals = _select(tables.read_runs(metrics / "image" / "eval"), ladder, seeds)
    trains = _select(tables.read_runs(metrics / "image" / "train"), ladder, seeds)
    t1, t1_numeric = tables.table1(evals, ladder)
    md = {"table1": tables.write_table(t1, out / "tables", "table1")}
    tables.write_table(t1_numeric, out / "tables", "table1_numeric")
    styles = tables.style_table(evals, ladder)
    if styles is not None:
        md["table1_styles"] = tables.write_table(styles, out / "tables", "table1_ood_by_style")

    figs: dict[str, list[Path]] = {}
    learned = {}
    for run in ladder:
        variant, prior = parse_run(run)
        if variant == "nac":
            model = load_model(checkpoint_path(run, seeds[0]))
            learned[prior] = model.link_probabilities().detach().numpy()
    figs["figure3"] = figures.figure3(learned, params["image"]["model"]["n_processor"], out / "figures")
    prune = pd.DataFrame(_select(json.loads((metrics / "image" / "prune.json").read_text()), ladder, seeds))
    prune_runs = [r for r in params["prune"]["runs"] if r in set(prune["run"])]
    # Figure 5a: the NAC of the chosen `prior` group against Perceiver IO (paper: scale-free)
    main_runs = [r for r in (f"nac-{params['prior']['name']}", "perceiver_io") if r in prune_runs] or prune_runs
    figs["figure5a"] = figures.figure5a(prune, out / "figures", main_runs)
    figs["figure5b"] = figures.figure5b(prune, out / "figures", prune_runs, str(prune["device"].iloc[0]))
    figs["figure15"] = figures.figure15(prune, out / "figures", prune_runs)
    histories = {run: [t["history"] for t in trains if t["run"] == run] for run in ladder}
    figs["learning_curves"] = figures.learning_curves(histories, out / "figures")

    summary = {"provenance": _provenance(params),
               "table1": {f"{r.run}/{r.metric}": {"mean": r.mean, "ci95": r.ci95, "paper": r.paper}
                          for r in t1_numeric.itertuples()},
               "prune": _prune_summary(prune, prune_runs)}
    _write_readme(out, summary, md, figs)
    write_json(out / "tables" / "summary.json", summary)
    # The DVC metric: the numbers `dvc exp show` / `dvc metrics diff` compare (means only).
    headline = {"table1": t1_numeric.pivot(index="run", columns="metric", values="mean").to_dict("index"),
                "prune_max_fraction_within_3pts": {run: v["max_fraction_within_3pts"] for run, v in summary["prune"].items()}}
    write_json(metrics / "summary.json", headline)
    return summary


def _prune_summary(prune: pd.DataFrame, runs: list[str]) -> dict[str, Any]:
    """Per run: the largest fraction of modules dropped before Acc@1 (mean over seeds) first
    falls more than 3 percentage points below the full model's, and the speed-up there."""
    res = {}
    for run in runs:
        sub = prune[prune["run"] == run].groupby("dropped_fraction")
        acc = sub["acc1"].mean().sort_index()
        speed = sub["images_per_s"].mean()
        within = (acc >= acc.loc[0.0] - 3.0).to_numpy()
        first_fail = int(within.argmin()) if not within.all() else len(within)
        frac = float(acc.index[max(first_fail - 1, 0)])
        res[run] = {"full_acc1": float(acc.loc[0.0]), "max_fraction_within_3pts": frac,
                    "speedup_at_that_fraction": float(speed.loc[frac] / speed.loc[0.0]),
                    "acc1_by_fraction": {str(k): float(v) for k, v in acc.items()}}
    return res


def _write_readme(out: Path, summary: dict, md: dict[str, str], figs: dict[str, list[Path]]) -> None:
    p = summary["provenance"]
    rel = lambda paths: paths[0].relative_to(out).as_posix()  # noqa: E731
    lines = [
        "# nac-repro report",
        "",
        f"Generated by `dvc repro` with profile **{p['profile']}** from code commit `{p['commit']}` on {p['date']}, "
        f"machine: {p['machine']}, torch {p['torch']}.",
        "",
        "Numbers are ours unless marked *paper*. Where the profile is not `paper`, the datasets are the embedded",
        "stand-ins (see the repository README), so compare directions and gaps, not absolute values.",
        "",
        "## Table 1: ablation ladder and graph priors (IID validation / OOD renditions)",
        "",
        "Each cell: ours, mean ± 95% CI over seeds (Student t), then [paper; ours − paper]. The paper's numbers are",
        "Tiny-ImageNet validation (IID) and Tiny-ImageNet-R (OOD).",
        "",
        md["table1"],
        "",
    ]
    if "table1_styles" in md:
        lines += ["OOD Acc@1 per rendition style:", "", md["table1_styles"], ""]
    lines += ["## Figure 3: graph priors and the graphs NACs learned", "", f"![Figure 3]({rel(figs['figure3'])})", "",
              "## Figures 5a, 5b, 15: dropping modules at inference", "",
              f"![Figure 5a]({rel(figs['figure5a'])})", "", f"![Figure 5b]({rel(figs['figure5b'])})", "",
              f"![Figure 15]({rel(figs['figure15'])})", ""]
    rows = [{"model": RUN_LABELS.get(k, k), "full Acc@1": round(v["full_acc1"], 2), "max fraction dropped within 3 points": v["max_fraction_within_3pts"],
             "speed-up there": round(v["speedup_at_that_fraction"], 2)} for k, v in summary["prune"].items()]
    lines += [pd.DataFrame(rows).to_markdown(index=False), "", "## Learning curves", "",
              f"![learning curves]({rel(figs['learning_curves'])})", ""]
    (out / "README.md").write_text("\n".join(lines))


__all__ = ["build_image_report"]
