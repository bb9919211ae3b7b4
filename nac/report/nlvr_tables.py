"""The NLVR tables (Figure 6's section): the conditional NAC's accuracy beside its controls and
the paper's, validation Acc@1 per reasoning type, and the circuit analysis of
``nlvr/analysis.json`` (does the circuit a sentence gets carry its reasoning type?)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from nac.report.published import NLVR, TRACK_RUN_LABELS
from nac.report.tables import DASH, _values, fmt, n_test_items, paired, se_at
from nac.stats import summarize


def _type_label(t: str) -> str:
    return t.replace("_", " ")


def nlvr_tables(
    results: list[dict[str, Any]], runs: list[str], analysis: dict[str, Any], clip_note: str
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """The NLVR tables: (accuracy of the conditional NAC and its controls, validation Acc@1 per
    reasoning type, the circuit analysis of ``nlvr/analysis.json``, numbers for summary.json)."""
    acc, summary = [], {"runs": {}, "analysis": dict(analysis)}
    for run in runs:
        s = {split: summarize(_values(results, run, f"{split}_acc1")) for split in ("val", "test")}
        chance = {split: float(np.mean(_values(results, run, f"{split}_chance"))) for split in ("val", "test")}
        mine = [r for r in results if r["run"] == run]
        paper = NLVR.get(run)
        acc.append(
            {
                "model": TRACK_RUN_LABELS.get(run, run),
                "seeds": str(s["val"]["n"]),
                **{
                    f"{split} Acc@1": fmt(
                        s[split]["mean"],
                        s[split]["ci95"],
                        s[split]["n"],
                        se_at(s[split]["mean"], n_test_items(mine, f"{split}_n")),
                    )
                    for split in ("val", "test")
                },
                "val chance": f"{chance['val']:.2f}",
                "test chance": f"{chance['test']:.2f}",
                "paper (NLVR2 val Acc@1)": DASH if paper is None else f"~{paper:.0f}",
                "ours − paper (val)": DASH if paper is None else f"{s['val']['mean'] - paper:+.2f}",
            }
        )
        summary["runs"][run] = {
            "val_acc1": s["val"],
            "test_acc1": s["test"],
            "val_chance": chance["val"],
            "test_chance": chance["test"],
            "paper_val_acc1": paper,
        }
    if "conditional" in runs:
        for control in (r for r in runs if r != "conditional"):
            d = {
                split: paired(
                    _values(results, "conditional", f"{split}_acc1"), _values(results, control, f"{split}_acc1")
                )
                for split in ("val", "test")
            }
            acc.append(
                {
                    "model": f"Conditional − {TRACK_RUN_LABELS.get(control, control).split(' (')[0]} "
                    "(95% CI, paired by seed)",
                    "seeds": str(d["val"]["n"]),
                    "val Acc@1": fmt(d["val"]["mean"], d["val"]["ci95"], d["val"]["n"]),
                    "test Acc@1": fmt(d["test"]["mean"], d["test"]["ci95"], d["test"]["n"]),
                    "val chance": DASH,
                    "test chance": DASH,
                    "paper (NLVR2 val Acc@1)": DASH,
                    "ours − paper (val)": DASH,
                }
            )
            summary["runs"][f"conditional_minus_{control}"] = {"val_acc1": d["val"], "test_acc1": d["test"]}
    acc.append(
        {
            "model": "CLIP zero-shot",
            "seeds": DASH,
            "val Acc@1": clip_note,
            "test Acc@1": DASH,
            "val chance": DASH,
            "test chance": DASH,
            "paper (NLVR2 val Acc@1)": f"{NLVR['clip_zero_shot']:.0f}",
            "ours − paper (val)": DASH,
        }
    )

    types = list(results[0]["val_acc1_by_type"])
    counts = analysis.get("count_by_type", {})
    by_type = []
    for run in runs:
        sub = [r for r in results if r["run"] == run]
        row = {"model": TRACK_RUN_LABELS.get(run, run)}
        for t in types:
            s = summarize([r["val_acc1_by_type"][t] for r in sub])
            row[f"{_type_label(t)} (n={counts[t]})" if t in counts else _type_label(t)] = fmt(
                s["mean"], s["ci95"], s["n"]
            )
            summary["runs"][run].setdefault("val_acc1_by_type", {})[t] = s
        by_type.append(row)
    return pd.DataFrame(acc), pd.DataFrame(by_type), analysis_table(analysis), summary


def analysis_table(a: dict[str, Any]) -> pd.DataFrame:
    """Does the circuit (``P``) the generator designs for a sentence carry its reasoning type?
    kNN and silhouette on PCA of ``P`` against shuffled types and the majority-type rate."""
    label = f"{a['run']} NAC, seed {a['seed']} ({a['split']}, {a['n']} sentences)"
    if "knn_accuracy" in a:
        knn = [fmt(a["knn_accuracy"], a["knn_accuracy_ci95"], 2), fmt(a["knn_shuffled"], a["knn_shuffled_ci95"], 2)]
        sil = [f"{a['silhouette']:.3f}", f"{a['silhouette_shuffled']:.3f}"]
    else:
        knn = sil = ["not computed (fewer than 2 sentences per type)", DASH]
    rows = [
        {
            "measure": f"kNN accuracy of the reasoning type from P (k={a['knn_k']}, "
            f"{a['folds']}-fold CV, ± 95% CI over folds)",
            label: knn[0],
            "shuffled types": knn[1],
            "chance (majority type)": f"{a['chance']:.2f}",
        },
        {
            "measure": f"silhouette of the reasoning types (PCA-{a['pca_dim']} of P)",
            label: sil[0],
            "shuffled types": sil[1],
            "chance (majority type)": "0 (no structure)",
        },
        {
            "measure": "spread of P across sentences (mean over module pairs of the std of P_ij)",
            label: f"{a['p_spread']:.4f}",
            "shuffled types": DASH,
            "chance (majority type)": DASH,
        },
        {
            "measure": "mean link probability P_ij",
            label: f"{a['p_mean']:.3f}",
            "shuffled types": DASH,
            "chance (majority type)": DASH,
        },
        {
            "measure": f"variance of P kept by PCA-{a['pca_dim']}",
            label: f"{100 * a['pca_explained']:.1f}%",
            "shuffled types": DASH,
            "chance (majority type)": DASH,
        },
    ]
    return pd.DataFrame(rows)
