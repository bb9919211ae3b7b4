"""The mechanism tables: how sparse each learned graph is, how close it is to each prior's
target (at initialisation and at the end of training), how far it moved, and what removing the
kernel at evaluation costs. Read from the training metrics' ``mechanism`` block
(``nac.mechanism``) and the evaluation metrics' ``iid_acc1_dense``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from nac.graphs import PRIORS
from nac.mechanism import degenerate_numbers
from nac.report.published import PRIOR_LABELS, RUN_LABELS
from nac.report.tables import DASH, fmt, paired
from nac.stats import summarize


def _by_run(rows: list[dict[str, Any]], ladder: list[str]) -> dict[str, list[dict[str, Any]]]:
    return {run: sorted((r for r in rows if r["run"] == run), key=lambda r: r["seed"]) for run in ladder}


def mechanism_table(trains: list[dict[str, Any]], evals: list[dict[str, Any]], ladder: list[str]) -> pd.DataFrame:
    """One row per model with a learned or fixed graph: sparsity and mean P at initialisation and at
    the end, the learned bandwidth, the change of P, the distance to its own prior's target, and
    the kernel ablation (IID Acc@1 with the kernel minus with dense attention, paired by seed)."""
    trains_by, evals_by = _by_run(trains, ladder), _by_run(evals, ladder)
    rows = []
    for run in ladder:
        ts = [t for t in trains_by[run] if "mechanism" in t]
        if not ts:
            continue
        own = run.split("-")[1] if run.startswith("nac-") else "scale_free"
        stat = lambda phase, key: summarize([100 * t["mechanism"][phase][key] for t in ts])  # noqa: E731
        dist = lambda phase: summarize([t["mechanism"][phase]["distance"].get(own, np.nan) for t in ts])  # noqa: E731
        row = {"model": RUN_LABELS.get(run, run), "own prior": PRIOR_LABELS.get(own, own), "seeds": len(ts)}
        for phase in ("init", "final"):
            s = stat(phase, "sparsity")
            row[f"links with P = 0 (%), {phase}"] = fmt(s["mean"], s["ci95"], s["n"])
        for phase in ("init", "final"):
            s = stat(phase, "mean_p")
            row[f"mean P (%), {phase}"] = fmt(s["mean"], s["ci95"], s["n"])
        if all("below_threshold" in t["mechanism"]["final"] for t in ts):
            s = stat("final", "below_threshold")
            row["links with P < 0.5 (%), final"] = fmt(s["mean"], s["ci95"], s["n"])
        if all(own in (t["mechanism"]["final"].get("structure") or {}) for t in ts):
            s = summarize([t["mechanism"]["final"]["structure"][own] for t in ts])
            row["structure (own prior), final"] = f"{s['mean']:.3f}"
        s = summarize([t["mechanism"]["final"]["bandwidth"] for t in ts])
        row["bandwidth, final"] = f"{s['mean']:.3f}"
        s = summarize([100 * t["mechanism"]["final"].get("links_changed", np.nan) for t in ts])
        row["links switched on/off (%)"] = fmt(s["mean"], s["ci95"], s["n"])
        for phase in ("init", "final"):
            s = dist(phase)
            row[f"distance to own prior, {phase}"] = f"{s['mean']:.4f}"
        es = evals_by[run]
        if es and all("iid_acc1_dense" in e for e in es):
            d = paired([e["iid_acc1"] for e in es], [e["iid_acc1_dense"] for e in es])
            row["kernel ablation: IID Acc@1 kernel − dense"] = f"{d['mean']:+.2f}" + (
                f" ± {d['ci95']:.2f}" if d["n"] > 1 else ""
            )
        else:
            row["kernel ablation: IID Acc@1 kernel − dense"] = DASH
        rows.append(row)
    return pd.DataFrame(rows)


def distance_table(trains: list[dict[str, Any]], ladder: list[str], phase: str) -> pd.DataFrame:
    """Rows: trained NACs (every prior, and the controls); columns: the four targets; cell: the
    regularizer distance of the model's P to that target at ``phase`` (init / final), mean over
    seeds; ``*`` marks the closest row of each column among the four prior NACs."""
    by = _by_run(trains, ladder)
    runs = [r for r in ladder if r.startswith("nac-") and any("mechanism" in t for t in by[r])]
    mean = {
        (r, p): float(np.mean([t["mechanism"][phase]["distance"].get(p, np.nan) for t in by[r]]))
        for r in runs
        for p in PRIORS
    }
    heads = [f"nac-{p}" for p in PRIORS if f"nac-{p}" in runs]
    best = {p: min(heads, key=lambda r: mean[(r, p)]) for p in PRIORS} if heads else {}
    rows = []
    for r in runs:
        row = {"trained NAC": RUN_LABELS.get(r, r)}
        for p in PRIORS:
            row[f"to {PRIOR_LABELS.get(p, p)}"] = f"{mean[(r, p)]:.4f}" + ("*" if best.get(p) == r else "")
        rows.append(row)
    return pd.DataFrame(rows)


def degenerate_table(trains: list[dict[str, Any]], ladder: list[str], n: int, prior: str) -> pd.DataFrame | None:
    """The headline NAC's learned graph beside the trivial graphs that could pass a mechanism claim
    without a learned structure (``nac.mechanism.degenerate_numbers``, at the ladder's size): the
    random-signature graph (the ``-randinit`` control at initialisation), the empty and the complete
    graph, and the uniform graph at the NAC's own density; each with the measures the claims use
    (density, share below the 0.5 cut, distance, structure and degree distance to ``prior``'s target)."""
    by = _by_run(trains, ladder)
    head = f"nac-{prior}"
    learned = [t["mechanism"]["final"] for t in by.get(head, []) if "mechanism" in t]
    if not learned or not all("structure" in m for m in learned):
        return None
    graphs: list[tuple[str, list[dict[str, Any]]]] = [(f"{RUN_LABELS.get(head, head)} (learned)", learned)]
    rand = [t["mechanism"]["init"] for t in by.get(f"{head}-randinit", []) if "mechanism" in t]
    if rand and all("structure" in m for m in rand):
        graphs.append(("random signatures (the -randinit control at initialisation)", rand))
    for kind in ("empty", "complete", "uniform"):
        label = f"{kind} graph" + (" at the NAC's density" if kind == "uniform" else "")
        graphs.append((label, [degenerate_numbers(n, m["mean_p"])[kind] for m in learned]))
    rows = []
    for label, ms in graphs:
        mean = lambda f: float(np.mean([f(m) for m in ms]))  # noqa: E731
        rows.append(
            {
                "graph": label,
                "mean P (%)": f"{100 * mean(lambda m: m['mean_p']):.1f}",
                "links with P < 0.5 (%)": f"{100 * mean(lambda m: m.get('below_threshold', np.nan)):.1f}",
                f"distance to {PRIOR_LABELS.get(prior, prior)}": f"{mean(lambda m: m['distance'][prior]):.4f}",
                "structure": f"{mean(lambda m: m['structure'][prior]):.3f}",
                "degree distance": f"{mean(lambda m: m.get('degree_distance', {}).get(prior, np.nan)):.3f}",
            }
        )
    return pd.DataFrame(rows)
