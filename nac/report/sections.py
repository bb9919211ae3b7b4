"""Sections of the report that ``nac.report.build.build_report`` assembles: Table 2 (points),
Table 3 (ListOps, text), NLVR (its tables and Figure 6), few-shot adaptation (Figure 4), the
tracks' learning curves, the switches, the convergence table and the dropping summary; each
writes its tables and figures under the report folder and returns its summary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nac import metrics_io
from nac.report import figures, graph_figures, nlvr_tables, switches, tables
from nac.report.published import PRIOR_LABELS, RUN_LABELS, TRACK_LABELS, TRACK_RUN_LABELS
from nac.stats import mean_ci

TRACKS = ("points", "listops", "text", "nlvr")


def caption(prov: dict, seeds: list[int]) -> str:
    """A figure's caption line: ``profile mini, seeds 0, 1, 2, model version b9a127c``."""
    seed_text = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {', '.join(str(s) for s in seeds)}"
    return f"profile {prov['profile']}, {seed_text}, model version {prov['commit']}"


def prior_label(params: dict) -> str:
    """``scale-free prior``: the prior of the tracks' NACs (the ``prior`` config group)."""
    return f"{PRIOR_LABELS.get(params['prior']['name'], params['prior']['name']).lower()} prior"


def comparison(
    params: dict, out: Path, metrics: Path, md: dict[str, str], tracks: list[str], published: dict, name: str
) -> dict[str, Any]:
    """Table 2 (``points``) or Table 3 (``listops``, ``text``)."""
    results = {t: tables.read_track(metrics, t, params[t]["runs"], params["seeds"]) for t in tracks}
    display, summary = tables.comparison_table(results, published, TRACK_LABELS, f"ours: {prior_label(params)}")
    md[name] = tables.write_table(display, out / "tables", name, ".2f")
    return summary


def nlvr(params: dict, out: Path, metrics: Path, md: dict[str, str], figs: dict[str, list[Path]]) -> dict[str, Any]:
    """The NLVR accuracy, per-type and circuit-analysis tables and Figure 6."""
    runs = params["nlvr"]["runs"]
    results = tables.read_track(metrics, "nlvr", runs, params["seeds"])
    analysis = metrics_io.nlvr_analysis(metrics / "nlvr" / "analysis.json")
    clip = (
        "not computed: no zero-shot CLIP stage in this suite"
        if params["profile"] == "paper"
        else "not computed: no CLIP weights offline / embedded profile"
    )
    acc, by_type, measures, summary = nlvr_tables.nlvr_tables(results, runs, analysis, clip)
    md["nlvr"] = tables.write_table(acc, out / "tables", "nlvr", ".2f")
    md["nlvr_by_type"] = tables.write_table(by_type, out / "tables", "nlvr_by_type", ".2f")
    md["nlvr_analysis"] = tables.write_table(measures, out / "tables", "nlvr_analysis", ".2f")
    embedding = metrics_io.nlvr_embedding(metrics / "nlvr" / "embedding.csv")
    examples = metrics_io.nlvr_examples(metrics / "nlvr" / "examples.json")
    seed = int((params["nlvr"].get("analysis") or {}).get("seed", params["seeds"][0]))  # the analysed model's
    figs["figure6"] = graph_figures.figure6(
        embedding, examples, out / "figures", caption=caption(md["caption_prov"], [seed])
    )
    return summary


def fewshot(params: dict, out: Path, metrics: Path, md: dict[str, str], figs: dict[str, list[Path]]) -> dict[str, Any]:
    """Figure 4, its table (per target and shot count) and the curves for `dvc plots`."""
    fs = params["fewshot"]
    rows = {t: pd.DataFrame(f["rows"]) for t, f in metrics_io.fewshot_targets(metrics, fs["targets"]).items()}
    stats = {t: tables.fewshot_stats(df.to_dict("records")) for t, df in rows.items()}
    md["figure4"] = tables.write_table(tables.fewshot_table(stats), out / "tables", "figure4_fewshot", ".2f")
    numeric = pd.concat([df.assign(target=t) for t, df in stats.items()])[
        ["target", "shots", "run", "mean", "ci95", "n"]
    ]
    tables.write_table(numeric, out / "tables", "figure4_fewshot_numeric", ".3f")
    for t, df in stats.items():  # one file per target: shots, perceiver_io, nac, nac_minus_perceiver_io
        plot_csv(df.pivot(index="shots", columns="run", values="mean").reset_index(), out / "plots" / "fewshot", t)
    labels = {"perceiver_io": TRACK_RUN_LABELS["perceiver_io"], "nac": f"NAC ({prior_label(params)})"}
    protocol = fs["protocol"]
    figs["figure4"] = figures.figure4(
        rows, sorted(protocol["shots"]), protocol["ways"], labels, out / "figures", caption=md["caption"]
    )
    low = numeric[(numeric["run"] == "nac_minus_perceiver_io") & (numeric["shots"] <= 4)]["mean"]
    return {
        "protocol": protocol,
        "source": fs["source"],
        "nac_minus_perceiver_io_shots_1_4": float(low.mean()) if len(low) else None,  # None: no shot count <= 4
        "targets": {
            t: {
                str(shots): {r.run: {"mean": r.mean, "ci95": r.ci95, "n": int(r.n)} for r in g.itertuples()}
                for shots, g in df.groupby("shots")
            }
            for t, df in stats.items()
        },
    }


def track_curves(params: dict, out: Path, metrics: Path, md: dict[str, str], figs: dict[str, list[Path]]) -> None:
    """Learning curves of the points, listops, text and nlvr tracks (figure and `dvc plots` files)."""
    histories, chance = {}, {}
    for track in TRACKS:
        results = tables.read_track(metrics, track, params[track]["runs"], params["seeds"])
        histories[track] = {run: [r["history"] for r in results if r["run"] == run] for run in params[track]["runs"]}
        chance[track] = float(sum(r["val_chance"] for r in results) / len(results))
        curve = pd.DataFrame([{"run": r["run"], **h} for r in results for h in r["history"]])
        plot_csv(
            curve.pivot_table(index="epoch", columns="run", values="val_acc1").reset_index(),
            out / "plots" / "learning_curves",
            track,
        )
    titles = {t: f"{TRACK_LABELS[t]} ({params[t]['dataset']})" for t in TRACKS}
    figs["learning_curves_tracks"] = figures.learning_curves_tracks(
        histories, chance, titles, TRACK_RUN_LABELS, out / "figures", caption=md["caption"]
    )


def plot_csv(df: pd.DataFrame, out_dir: Path, name: str) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    df.columns.name = None
    df.to_csv(out_dir / f"{name}.csv", index=False)


def mean_text(values: list[float]) -> str:
    """'mean ± CI half-width (n seeds)', or the value and '(1 seed)'."""
    iv = mean_ci(values)
    return (
        f"{iv.estimate:.2f} ± {iv.hi - iv.estimate:.2f} ({iv.n} seeds)"
        if iv.has_ci
        else f"{iv.estimate:.2f} ({len(values)} seed)"
    )


def convergence_table(conv: dict, histories: dict[str, list[list[dict]]]) -> pd.DataFrame:
    """Per model of ``bench/bench_convergence.py``'s runs: this pipeline's final validation Acc@1
    and its gain over the last epoch (means over seeds), then for each longer length the final
    validation Acc@1, OOD Acc@1 and, for models with a kernel, the kernel ablation (IID Acc@1 with
    the kernel minus with dense attention at evaluation) and the share of links with P = 0 at the
    end, each mean ± 95% CI over the seeds run at that length; "—" where a model has no value."""
    rows = []
    for run, by_len in conv["runs"].items():
        own = [h for h in histories.get(run, []) if h]
        row = {"model": RUN_LABELS.get(run, run)}
        if own:
            row[f"this pipeline: val Acc@1 after {len(own[0])} epochs"] = mean_text([h[-1]["val_acc1"] for h in own])
            gains = [h[-1]["val_acc1"] - h[-2]["val_acc1"] for h in own if len(h) > 1]
            row["its gain over the last epoch"] = round(float(np.mean(gains)), 2) if gains else "n/a (one epoch)"
        for epochs, by_seed in sorted(by_len.items(), key=lambda kv: int(kv[0])):
            row[f"{epochs} epochs: val Acc@1"] = mean_text([r["val_acc1"][-1] for r in by_seed.values()])
            ood = [r["eval"]["ood_acc1"] for r in by_seed.values() if "eval" in r]
            row[f"{epochs} epochs: OOD Acc@1"] = mean_text(ood) if ood else "—"
            ablation = [
                r["eval"]["iid_acc1"] - r["eval"]["iid_acc1_dense"]
                for r in by_seed.values()
                if "iid_acc1_dense" in r.get("eval", {})
            ]
            row[f"{epochs} epochs: kernel − dense attention (IID Acc@1)"] = mean_text(ablation) if ablation else "—"
            sparsity = [100 * r["mechanism"]["final"]["sparsity"] for r in by_seed.values() if "mechanism" in r]
            if sparsity:
                row[f"{epochs} epochs: links with P = 0 (%)"] = mean_text(sparsity)
        rows.append(row)
    # a cell a model has no value for (no graph, or a length it was not run at) reads "—", not "nan"
    return pd.DataFrame(rows).astype(object).fillna("—")


def switches_section(params: dict, metrics: Path, out: Path, md: dict[str, str], root: Path) -> None:
    """Every switch between the authors' model and ours, and the measured effect of the mechanism
    switches (``bench/bench_switches.py``'s ``BENCH`` under the repository folder ``root``), paired by
    seed with this pipeline's default NAC."""
    path = root / switches.BENCH
    bench = json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
    md["switches_status"] = switches.bench_status(bench, params) or ""
    long = None
    if not md["switches_status"]:
        run, seeds = f"nac-{params['prior']['name']}", params["seeds"]
        defaults = {}
        for s in seeds:
            ev = json.loads((metrics / "image" / "eval" / f"{run}-{s}.json").read_text(encoding="utf-8"))
            tr = json.loads((metrics / "image" / "train" / f"{run}-{s}.json").read_text(encoding="utf-8"))
            defaults[s] = (ev, tr["mechanism"]["final"])
        long = switches.effects(bench, defaults, params["prior"]["name"], seeds)
        tables.write_table(long, out / "tables", "switch_effects_numeric")
        md["switch_effects"] = tables.write_table(switches.effects_display(long), out / "tables", "switch_effects")
    md["switches"] = tables.write_table(switches.switch_table(long), out / "tables", "switches")


def prune_summary(prune: pd.DataFrame, runs: list[str]) -> dict[str, Any]:
    """Per run, connectivity order: the largest fraction of modules dropped before Acc@1 (mean over
    seeds) first falls more than 3 percentage points below the full model's, and the throughput
    speed-up there with a 95% CI over the timed repeats (first seed)."""
    res = {}
    conn = prune[prune["order"] == "connectivity"] if "order" in prune else prune
    for run in runs:
        sub = conn[conn["run"] == run].groupby("dropped_fraction")
        acc = sub["acc1"].mean().sort_index()
        within = (acc >= acc.loc[0.0] - 3.0).to_numpy()
        first_fail = int(within.argmin()) if not within.all() else len(within)
        frac = float(acc.index[max(first_fail - 1, 0)])
        timed = conn[(conn["run"] == run)].dropna(subset=["images_per_s"]).set_index("dropped_fraction")["images_per_s"]
        full, there = np.asarray(timed.loc[0.0], dtype=float), np.asarray(timed.loc[frac], dtype=float)
        iv = mean_ci(there / full.mean())  # each timed repeat of the smaller model over the full model's mean
        res[run] = {
            "full_acc1": float(acc.loc[0.0]),
            "max_fraction_within_3pts": frac,
            "speedup_at_that_fraction": iv.estimate,
            "speedup_ci95": (iv.hi - iv.estimate) if iv.has_ci else None,
            "acc1_by_fraction": {str(k): float(v) for k, v in acc.items()},
        }
    return res
