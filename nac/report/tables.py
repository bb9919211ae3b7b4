"""Tables as pandas DataFrames, written as Markdown and CSV: ours (mean +- 95% CI over seeds)
and differences between models beside the paper's differences."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nac import metrics_io
from nac.registry import BASELINES
from nac.report.published import PAPER_ROW, RUN_LABELS, TABLE1, TABLE1_COLUMNS
from nac.stats import binomial_se, summarize, welch_ci

BASELINE_RUNS = tuple(BASELINES)  # the baselines' run names (not in the paper)

DASH = "—"  # a cell that does not apply (never left empty, so every CSV cell is filled)
COLUMN_LABELS = {"iid_acc1": "IID Acc@1", "iid_acc5": "IID Acc@5", "ood_acc1": "OOD Acc@1", "ood_acc5": "OOD Acc@5"}


def fmt(mean: float, ci: float, n: int, se: float | None = None) -> str:
    """``mean ± ci`` (the seeds' 95% CI; the mean alone for one seed), then ``(SE x)``: the binomial
    standard error of one run's accuracy on its test set, where ``se`` is given."""
    cell = f"{mean:.2f}" if n < 2 else f"{mean:.2f} ± {ci:.2f}"
    return cell if se is None else f"{cell} (SE {se:.2f})"


def n_test_items(rows: list[dict[str, Any]], key: str) -> int | None:
    """The one test-set size ``key`` of ``rows`` (None where absent); an error where runs differ."""
    sizes = {int(r[key]) for r in rows if r.get(key) is not None}
    if len(sizes) > 1:
        raise ValueError(
            f"runs measured on test sets of different sizes ({key}: {sorted(sizes)}); rerun the eval stage"
        )
    return sizes.pop() if sizes else None


def se_at(mean: float, n: int | None) -> float | None:
    """``binomial_se`` at a mean accuracy, None without a test-set size."""
    return None if n is None else binomial_se(min(max(mean, 0.0), 100.0), n)


def table1(
    evals: list[dict[str, Any]], ladder: list[str], parameters: dict[str, int] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Returns (display table, long numeric table). Display: one row per ladder entry, each metric
    ``mean ± 95% CI`` over seeds, then Acc@1 minus Perceiver IO's, paired by seed (runs that share
    a seed share the data order), beside the paper's difference. Absolute accuracies are never
    set against the paper's: the stand-in datasets differ from Tiny-ImageNet (10 vs 200 classes)."""
    df = pd.DataFrame(evals)
    display, numeric = [], []
    base = df[df["run"] == "perceiver_io"].sort_values("seed")
    for run in ladder:
        sub = df[df["run"] == run].sort_values("seed")
        if sub.empty:
            raise ValueError(
                f"no evaluation metrics for run {run!r}; did the train stage run (python stages/train.py)?"
            )
        row = {"model": RUN_LABELS.get(run, run), "seeds": int(len(sub))}
        if parameters:
            row["parameters"] = f"{parameters.get(run, 0):,}"
        for i, col in enumerate(TABLE1_COLUMNS):
            s = summarize(sub[col].tolist())
            n_test = n_test_items(sub.to_dict("records"), f"{col.split('_')[0]}_n")
            se = se_at(s["mean"], n_test)
            row[COLUMN_LABELS[col]] = fmt(s["mean"], s["ci95"], s["n"], se)
            numeric.append(
                {
                    "run": run,
                    "metric": col,
                    "mean": s["mean"],
                    "ci95": s["ci95"],
                    "n": s["n"],
                    "test_n": DASH if n_test is None else n_test,
                    "binomial_se": DASH if se is None else se,
                    "paper": TABLE1[run][i] if run in TABLE1 else DASH,
                }
            )  # controls, baselines: not in the paper
        for col in ("iid_acc1", "ood_acc1"):
            paper = (
                TABLE1.get(run, (np.nan,) * 4)[TABLE1_COLUMNS.index(col)]
                - TABLE1["perceiver_io"][TABLE1_COLUMNS.index(col)]
            )
            label = f"{COLUMN_LABELS[col]} − PIO: ours [paper]"
            if run == "perceiver_io" or list(base["seed"]) != list(sub["seed"]):
                row[label] = DASH
                continue
            d = paired(sub[col].tolist(), base[col].tolist())
            ours = f"{d['mean']:+.2f}" + (f" ± {d['ci95']:.2f}" if d["n"] > 1 else "")
            row[label] = f"{ours} [{paper:+.2f}]" if np.isfinite(paper) else f"{ours} [{DASH}]"
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


def write_table(df: pd.DataFrame, out_dir: str | Path, name: str, floatfmt: str = "g") -> str:
    """Write ``<name>.md`` and ``<name>.csv``; returns the Markdown. ``floatfmt`` formats the
    Markdown's numeric cells (tabulate also parses cells such as "50.00" as numbers)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    md = df.to_markdown(index=False, floatfmt=floatfmt)
    (out_dir / f"{name}.md").write_text(md + "\n", encoding="utf-8")
    df.to_csv(out_dir / f"{name}.csv", index=False)
    return md


# ---- the other tracks: Tables 2 and 3, NLVR, few-shot (Figure 4) ----


def welch(a: list[float], b: list[float]) -> dict[str, float]:
    """``mean(a) - mean(b)`` with Welch's 95% CI half-width (``nac.stats.welch_ci``, the same sign
    convention); 0 when either side has fewer than two values or both have no spread."""
    iv = welch_ci(a, b)
    return {"mean": iv.estimate, "ci95": 0.0 if iv.hi is None else float(iv.hi - iv.estimate), "n": int(iv.n)}


def paired(a: list[float], b: list[float]) -> dict[str, float]:
    """``a - b`` paired element-wise (as ``nac.stats.paired_ci``): mean and Student-t 95% CI
    half-width of the differences (paired t)."""
    return summarize((np.asarray(a, dtype=float) - np.asarray(b, dtype=float)).tolist())


def read_track(metrics: str | Path, track: str, runs: list[str], seeds: list[int]) -> list[dict[str, Any]]:
    """``metrics/tracks/<track>/<run>-<seed>.json`` of every configured run and seed."""
    return metrics_io.track_runs(metrics, track, runs, seeds)  # validated; exactly these files, no extra


def _values(results: list[dict[str, Any]], run: str, key: str) -> list[float]:
    return [r[key] for r in results if r["run"] == run]


def comparison_table(
    results: dict[str, list[dict[str, Any]]],
    published: dict[str, dict[str, float]],
    track_labels: dict[str, str],
    nac_label: str,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Tables 2 and 3: the paper's rows with ours (test Acc@1, mean ± 95% CI over seeds) beside
    Perceiver IO and NAC, then NAC − Perceiver IO (95% CI, paired by seed) beside the paper's
    difference, and the test split's majority-class rate. Absolute accuracies are never subtracted
    from the paper's (the embedded stand-ins are other datasets). ``results``: track -> metrics of
    runs ``perceiver_io`` and ``nac`` (and of a baseline, which gets its own rows).
    Returns (display table, numbers per track for summary.json)."""
    ours_row = {label: run for run, label in PAPER_ROW.items()}
    summary: dict[str, Any] = {track: {} for track in results}
    rows: list[dict[str, Any]] = []

    def cells(
        row: dict, track: str, paper: float | None, stat: dict | None, signed: bool = False, se: bool = False
    ) -> None:
        label = track_labels[track]
        row[f"{label}: paper"] = DASH if paper is None else f"{paper:+.2f}" if signed else f"{paper:.2f}"
        b = se_at(stat["mean"], n_test_items(results[track], "test_n")) if se and stat is not None else None
        row[f"{label}: ours"] = "not run" if stat is None else fmt(stat["mean"], stat["ci95"], stat["n"], b)

    seeds = "/".join(sorted({str(len(_values(res, "nac", "test_acc1"))) for res in results.values()}))
    for name, paper in published.items():
        run = ours_row.get(name)
        row = {"model": f"{name} ({nac_label})" if run == "nac" else name, "seeds": seeds if run else DASH}
        for track, res in results.items():
            stat = summarize(_values(res, run, "test_acc1")) if run else None
            cells(row, track, paper.get(track), stat, se=True)
            if run:
                chance = float(np.mean(_values(res, run, "test_chance")))
                summary[track][run] = {**stat, "paper": paper.get(track), "chance": chance}
        rows.append(row)
    row = {"model": "NAC − Perceiver IO (95% CI, paired by seed)", "seeds": seeds}
    for track, res in results.items():
        stat = paired(_values(res, "nac", "test_acc1"), _values(res, "perceiver_io", "test_acc1"))
        paper = published["NAC"][track] - published["Perceiver IO"][track]
        cells(row, track, paper, stat, signed=True)
        summary[track]["nac_minus_perceiver_io"] = {**stat, "paper": paper}
    rows.append(row)
    # Baselines (not in the paper) on the tracks that ran them: their row, then their difference
    # to Perceiver IO paired by seed; "not run" on the others.
    for b in [b for b in BASELINE_RUNS if any(_values(res, b, "test_acc1") for res in results.values())]:
        row, diff = (
            {"model": RUN_LABELS[b], "seeds": seeds},
            {"model": f"{RUN_LABELS[b]} − Perceiver IO (95% CI, paired by seed)", "seeds": seeds},
        )
        for track, res in results.items():
            vals = _values(res, b, "test_acc1")
            stat = summarize(vals) if vals else None
            dstat = paired(vals, _values(res, "perceiver_io", "test_acc1")) if vals else None
            cells(row, track, None, stat, se=True)
            cells(diff, track, None, dstat)
            if vals:
                summary[track][b] = {**stat, "chance": float(np.mean(_values(res, b, "test_chance")))}
                summary[track][f"{b}_minus_perceiver_io"] = dstat
        rows += [row, diff]
    row = {"model": "majority-class rate (test split)", "seeds": DASH}
    for track, res in results.items():
        chance = float(np.mean([r["test_chance"] for r in res]))
        cells(row, track, None, {"mean": chance, "ci95": 0.0, "n": 1})
        summary[track]["test_chance"] = chance
    rows.append(row)
    return pd.DataFrame(rows), summary


FEWSHOT_BASELINES = BASELINE_RUNS


def fewshot_stats(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Per shot count: query Acc@1 of Perceiver IO and NAC (mean, Student-t 95% CI over episodes)
    and NAC − Perceiver IO paired by episode (both models see the same episodes). Long table:
    ``shots, run, mean, ci95, n`` with run in perceiver_io / nac / nac_minus_perceiver_io; then,
    for each baseline with rows (``FEWSHOT_BASELINES``), ``<baseline>`` and
    ``<baseline>_minus_perceiver_io`` (paired by episode the same way)."""
    frame = pd.DataFrame(rows)
    wide = frame.pivot(index=["shots", "episode"], columns="run", values="acc1")
    n_query = n_test_items(rows, "n_query")
    baselines = [b for b in FEWSHOT_BASELINES if b in wide.columns]
    out = []
    for shots, g in wide.groupby(level="shots"):
        both = g[["perceiver_io", "nac"]].dropna()
        for run, vals in (
            ("perceiver_io", g["perceiver_io"].dropna()),
            ("nac", g["nac"].dropna()),
            ("nac_minus_perceiver_io", both["nac"] - both["perceiver_io"]),
        ):
            out.append({"shots": int(shots), "run": run, **summarize(vals.tolist()), **_se(run, vals, n_query)})
        for b in baselines:
            pair = g[["perceiver_io", b]].dropna()
            for run, vals in ((b, g[b].dropna()), (f"{b}_minus_perceiver_io", pair[b] - pair["perceiver_io"])):
                out.append({"shots": int(shots), "run": run, **summarize(vals.tolist()), **_se(run, vals, n_query)})
    return pd.DataFrame(out)


def _se(run: str, vals: pd.Series, n_query: int | None) -> dict[str, float]:
    """A model's row: the binomial SE of one episode's accuracy on its ``n_query`` queries (NaN for a
    difference row or without the size)."""
    se = None if run.endswith("_minus_perceiver_io") else se_at(float(vals.mean()), n_query)
    return {"binomial_se": np.nan if se is None else se}


def fewshot_table(stats: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Display table of Figure 4: one row per target and shot count (the baselines' columns, each
    with its paired difference to Perceiver IO, when they have rows)."""
    rows = []
    for target, df in stats.items():
        for shots, g in df.groupby("shots"):
            s = g.set_index("run")
            cell = lambda run: fmt(s.loc[run, "mean"], s.loc[run, "ci95"], int(s.loc[run, "n"]), _se_cell(s, run))  # noqa: E731
            row = {
                "target": target,
                "shots": int(shots),
                "episodes": int(s.loc["nac_minus_perceiver_io", "n"]),
                "Perceiver IO": cell("perceiver_io"),
                "NAC": cell("nac"),
                "NAC − Perceiver IO (paired)": cell("nac_minus_perceiver_io"),
            }
            for b in FEWSHOT_BASELINES:
                if b in s.index:
                    name = RUN_LABELS.get(b, b).replace(" (baseline)", "")
                    row[RUN_LABELS.get(b, b)] = cell(b)
                    row[f"{name} − Perceiver IO (paired)"] = cell(f"{b}_minus_perceiver_io")
            rows.append(row)
    return pd.DataFrame(rows)


def _se_cell(s: pd.DataFrame, run: str) -> float | None:
    v = s.loc[run, "binomial_se"] if "binomial_se" in s.columns else np.nan
    return None if pd.isna(v) else float(v)


PRUNE_CONTROL_FRACTIONS = (0.5, 0.75, 0.875)


def random_order_mean(prune: pd.DataFrame) -> pd.DataFrame:
    """The random-order control per (run, seed, dropped_fraction): Acc@1 averaged over the orders."""
    rnd = prune[prune["order"].str.startswith("random")]
    return rnd.groupby(["run", "seed", "dropped_fraction", "dropped"], as_index=False)["acc1"].mean()


def prune_control_table(prune: pd.DataFrame, runs: list[str]) -> pd.DataFrame:
    """Dropping the least connected modules first against dropping them in random orders: Acc@1 of
    each (mean ± 95% CI over seeds; random orders averaged within a seed first) and the difference,
    paired by seed, at the fractions of ``PRUNE_CONTROL_FRACTIONS`` that were measured."""
    if "order" not in prune or not prune["order"].str.startswith("random").any():
        return pd.DataFrame([{"model": DASH, "note": "no random-order control in prune.json (prune.random_orders: 0)"}])
    conn = prune[prune["order"] == "connectivity"]
    rnd = random_order_mean(prune)
    rows = []
    for run in runs:
        for f in PRUNE_CONTROL_FRACTIONS:
            a = conn[(conn["run"] == run) & (conn["dropped_fraction"] == f)].sort_values("seed")
            b = rnd[(rnd["run"] == run) & (rnd["dropped_fraction"] == f)].sort_values("seed")
            if a.empty or list(a["seed"]) != list(b["seed"]):
                continue
            sa, sb = summarize(a["acc1"].tolist()), summarize(b["acc1"].tolist())
            d = paired(a["acc1"].tolist(), b["acc1"].tolist())
            rows.append(
                {
                    "model": RUN_LABELS.get(run, run),
                    "dropped fraction": f,
                    "Acc@1, ranked": fmt(sa["mean"], sa["ci95"], sa["n"]),
                    "Acc@1, random orders": fmt(sb["mean"], sb["ci95"], sb["n"]),
                    "ranked − random (paired by seed)": f"{d['mean']:+.2f}"
                    + (f" ± {d['ci95']:.2f}" if d["n"] > 1 else ""),
                }
            )
    return pd.DataFrame(rows)
