"""Claims on the conditional NAC on NLVR (section 4.4, Figure 6): against CLIP zero-shot, against
its single-modality controls, and the structure of the graphs it generates."""

from __future__ import annotations

import math

import numpy as np

from nac.report.claims.deltas import accuracy_delta, delta_line, noise_floor
from nac.report.claims.metrics import NLVR_CONTROLS, Missing, number
from nac.report.claims.registry import Context, claim
from nac.report.claims.rules import (
    NOT_SUPPORTED,
    PAIRED,
    SUPPORTED,
    _ci_text,
    _diff,
    _result,
    combine,
    difference_verdict,
    part,
    seed_ci,
)
from nac.stats import Interval

TYPE_DELTA = 1.0  # points of kNN accuracy of the reasoning type (nlvr_type_structure)
SPREAD_MIN = 0.10  # fraction of sentences whose 0.5-cut graph must differ from the most common one
ZERO_SHOT_RUN = "zero_shot"  # an nlvr run of that name, if ever configured, is the zero-shot row


def knn_gap(acc: float, acc_half: float, base: float, base_half: float, folds: int) -> Interval:
    """kNN accuracy minus a baseline's, with the two CV half-widths combined in quadrature (no CI
    below 2 folds)."""
    d, half = acc - base, math.hypot(acc_half, base_half)
    return Interval(d, d - half, d + half, folds) if folds >= 2 else Interval(d, None, None, folds)


def _has_zero_shot(params: dict) -> bool:
    return ZERO_SHOT_RUN in params.get("nlvr", {}).get("runs", [])


@claim(
    "nlvr_vs_zeroshot",
    source="abstract, §4.4",
    statement="The conditional NAC improves on CLIP zero-shot on NLVR2",
    paper="~64 vs 53 (CLIP zero-shot) = +11, NLVR2 validation",
    measure=lambda c: (
        (
            f"d = val Acc@1 conditional − {ZERO_SHOT_RUN}"
            if _has_zero_shot(c.params)
            else "not measured: this suite has no CLIP zero-shot row, and no other control stands in for it"
        )
        + f"; {PAIRED}; δ = {accuracy_delta(c.params, 'nlvr_val'):g}"
    ),
    delta=lambda c: delta_line(c.params, "nlvr_val", why="a practical threshold below the paper's +11"),
    effect=lambda c: 11.0,
)
def nlvr_vs_zeroshot(c: Context) -> dict:
    if not _has_zero_shot(c.params):
        raise Missing("no CLIP zero-shot row in this suite (no CLIP weights offline); no substitute control is used")
    vals = c.m.track("nlvr", ["conditional", ZERO_SHOT_RUN], "val_acc1")
    return _diff(vals, "conditional", ZERO_SHOT_RUN, delta=accuracy_delta(c.params, "nlvr_val"))


@claim(
    "nlvr_uses_both",
    source="§4.4 (suite check)",
    statement="The conditional NAC beats each single-modality control",
    paper="no number",
    measure=lambda c: (
        f"d = test Acc@1 conditional − text_only and − image_only (shown: the better control); "
        f"{PAIRED}; δ = {accuracy_delta(c.params, 'nlvr'):g}; all controls"
    ),
    delta=lambda c: delta_line(c.params, "nlvr", why="a practical threshold (no number in the paper)"),
)
def nlvr_uses_both(c: Context) -> dict:
    vals = c.m.track("nlvr", ["conditional", *NLVR_CONTROLS], "test_acc1")
    best = max(NLVR_CONTROLS, key=lambda r: np.mean(vals[r]))
    d = accuracy_delta(c.params, "nlvr")
    parts = [part(ctrl, difference_verdict(seed_ci(vals["conditional"], vals[ctrl]), d)) for ctrl in NLVR_CONTROLS]
    out = _diff(vals, "conditional", best, delta=d)
    return _result(seed_ci(vals["conditional"], vals[best]), combine(parts, "controls"), out["ours"], parts=parts)


def _analysis(c: Context) -> tuple[dict, str]:
    a, where = c.m.json("nlvr/analysis.json"), c.m.label("nlvr/analysis.json")
    if not isinstance(a, dict):
        raise ValueError(f"malformed metrics {where}: expected an object")
    return a, where


@claim(
    "nlvr_type_structure",
    source="§4.4 (Fig. 6)",
    statement="Different sentence (reasoning) types get different graphs",
    paper="no number (types cluster in the t-SNE of P)",
    measure=f"d = kNN accuracy of the type from PCA(P) − the same for a freshly initialised model of the same config "
    f"(the untrained-generator control: structure inherited from the sentence alone); CI over CV folds, "
    f"half-widths combined in quadrature; δ = {TYPE_DELTA:g}; and the silhouette of the types above the control's",
    delta=lambda c: (
        f"δ = {TYPE_DELTA:g} points: a practical threshold, a kNN accuracy on the analysed sentences "
        f"(its folds' spread in the CI)"
    ),
)
def nlvr_type_structure(c: Context) -> dict:
    a, where = _analysis(c)
    u = a.get("untrained")
    if not isinstance(u, dict) or "knn_accuracy" not in u or "knn_accuracy" not in a:
        raise Missing(f"kNN accuracy of the trained and the untrained-generator control in {where}")
    iv = knn_gap(
        number(a, "knn_accuracy", where),
        number(a, "knn_accuracy_ci95", where),
        number(u, "knn_accuracy", where),
        number(u, "knn_accuracy_ci95", where),
        int(number(a, "folds", where)),
    )
    sil, sil_u = number(a, "silhouette", where), number(u, "silhouette", where)
    parts = [
        part("kNN excess over the untrained generator", difference_verdict(iv, TYPE_DELTA)),
        part(
            "silhouette",
            (SUPPORTED, f"{sil:.3f} > untrained {sil_u:.3f}")
            if sil > sil_u
            else (NOT_SUPPORTED, f"{sil:.3f} ≤ untrained {sil_u:.3f}"),
        ),
    ]
    ours = (
        f"d = {_ci_text(iv)}; kNN trained {a['knn_accuracy']:.2f} vs untrained {u['knn_accuracy']:.2f} "
        f"(shuffled types {a.get('knn_shuffled', float('nan')):.2f}); "
        f"silhouette trained {sil:.3f} vs untrained {sil_u:.3f}"
    )
    return _result(iv, combine(parts, "measures"), ours, parts=parts)


@claim(
    "nlvr_diversity",
    source="§4.4 (Fig. 6)",
    statement="The generated graphs are diverse: not complete, and different per sentence (sparsity: see the density)",
    paper="no number (Figure 6 draws graphs at the 0.5 cut)",
    measure=f"at the 0.5 cut: fewer than half of the sentence graphs complete, and at least {100 * SPREAD_MIN:.0f}% "
    "of sentences with a graph other than the most common one; and, since an untrained generator already gives "
    "every sentence its own random graph, the trained generator's graphs vary more with the sentence than the "
    "untrained one's (p_spread: each link's standard deviation of P over sentences, averaged over links; the "
    "untrained generator: the same architecture at a fresh initialisation, same sentences) (single "
    "measurements, all three)",
    delta="no δ: thresholds of one measurement each (half the graphs, the share of distinct graphs "
    f"{100 * SPREAD_MIN:.0f}%, the untrained generator's spread), practical thresholds",
)
def nlvr_diversity(c: Context) -> dict:
    a, where = _analysis(c)
    complete = number(a, "cut_complete_fraction", where) if "cut_complete_fraction" in a else None
    distinct = number(a, "cut_distinct_fraction", where) if "cut_distinct_fraction" in a else None
    if complete is None or distinct is None:
        raise Missing(f"cut_complete_fraction / cut_distinct_fraction in {where}")
    untrained = a.get("untrained") or {}
    if "p_spread" not in a or "p_spread" not in untrained:
        raise Missing(f"p_spread of the trained and the untrained generator in {where}")
    spread, spread_u = number(a, "p_spread", where), number(untrained, "p_spread", where)
    verdict = lambda ok, text: ((SUPPORTED if ok else NOT_SUPPORTED), text)  # noqa: E731
    parts = [
        part("not complete at the 0.5 cut", verdict(complete < 0.5, f"{100 * complete:.1f}% of graphs complete")),
        part(
            "differ between sentences",
            verdict(distinct >= SPREAD_MIN, f"{100 * distinct:.1f}% differ from the most common graph"),
        ),
        part(
            "more sentence-dependent than the untrained generator",
            verdict(spread > spread_u, f"p_spread {spread:.3f} vs untrained {spread_u:.3f}"),
        ),
    ]
    iv = Interval(spread - spread_u, None, None, 1)
    ours = (
        f"at P > 0.5: density {100 * number(a, 'cut_density', where):.1f}%, {100 * complete:.1f}% of graphs complete, "
        f"{100 * distinct:.1f}% differ from the most common graph (untrained generator: "
        f"{100 * float(untrained.get('cut_distinct_fraction', float('nan'))):.1f}%); p_spread {spread:.3f} vs "
        f"untrained {spread_u:.3f} (n = {int(a.get('n', 0))} sentences, one model)"
    )
    return _result(iv, combine(parts, "criteria"), ours, threshold=True, parts=parts)


TWO_CLIQUES_MIN = 0.5  # fraction of sentence graphs that must show two large clique-like communities
MODULARITY_DELTA = 0.02  # smallest modularity excess over the degree-preserving shuffles of interest
TWO_CLIQUES_DELTA = 5.0  # ... and of the two-clique fraction, in percentage points


def two_cliques_delta(params: dict) -> float:
    """δ of the two-clique rate: ``TWO_CLIQUES_DELTA`` or, above it, the noise floor of a rate difference on
    the analysed sentences (``nlvr.analysis.clique_sentences``), rounded up to 0.01."""
    n = ((params.get("nlvr") or {}).get("analysis") or {}).get("clique_sentences")
    return math.ceil(100 * max(TWO_CLIQUES_DELTA, noise_floor(int(n)) if n else 0.0)) / 100


def _two_cliques_delta(params: dict) -> str:
    n = ((params.get("nlvr") or {}).get("analysis") or {}).get("clique_sentences")
    d = two_cliques_delta(params)
    floor = (
        f"the noise floor of a rate difference on {n} sentences is {noise_floor(int(n)):.2f} points"
        if n
        else "the number of sentences is not configured here"
    )
    return (
        f"δ = {MODULARITY_DELTA:g} of modularity (a practical threshold) and δ = {d:g} points of the two-clique "
        f"rate: max({TWO_CLIQUES_DELTA:g}, the noise floor; {floor})"
    )


@claim(
    "nlvr_two_cliques",
    source="§4.4 (Fig. 6)",
    statement="The generated graphs share a structure of two large cliques",
    paper='no number ("all learned graphs are similarly structured with two large cliques")',
    measure="each sentence graph (P > 0.5; up to 200 validation sentences) against the same graph with its links "
    "rewired by degree-preserving double edge swaps "
    "(one shuffle per graph; the control: same degrees, no other structure): "
    "d1 = modularity of a greedy-modularity partition minus the shuffles' (δ = "
    f"{MODULARITY_DELTA:g}), d2 = [exactly two communities of ≥ 20% of the modules with ≥ 80% of their links] "
    f"minus the shuffles' rate, in points (δ = {TWO_CLIQUES_DELTA:g}, or the noise floor of a rate difference on the "
    "sentences where that is larger); both paired by sentence, 95% t CI; and "
    f"that structure in at least {100 * TWO_CLIQUES_MIN:.0f}% of the graphs (single measurement); all three",
    delta=lambda c: _two_cliques_delta(c.params),
)
def nlvr_two_cliques(c: Context) -> dict:
    a, where = _analysis(c)
    keys = (
        "clique_n",
        "clique_modularity_gap",
        "clique_modularity_gap_ci95",
        "clique_two_fraction",
        "clique_two_fraction_null",
        "clique_two_gap",
        "clique_two_gap_ci95",
    )
    if any(k not in a for k in keys):
        raise Missing(f"the clique measures (clique_modularity_gap, clique_two_gap, ...) in {where}")
    n = int(number(a, "clique_n", where))

    def interval(key: str) -> Interval:
        d, half = number(a, key, where), number(a, f"{key}_ci95", where)
        return Interval(d, d - half, d + half, n) if n >= 2 else Interval(d, None, None, n)

    q_iv, two_iv = interval("clique_modularity_gap"), interval("clique_two_gap")
    frac = number(a, "clique_two_fraction", where)
    parts = [
        part("modularity above the degree-preserving shuffles", difference_verdict(q_iv, MODULARITY_DELTA)),
        part("two-clique rate above the shuffles", difference_verdict(two_iv, two_cliques_delta(c.params))),
        part(
            "two cliques in most graphs",
            (SUPPORTED, f"{100 * frac:.1f}% ≥ {100 * TWO_CLIQUES_MIN:.0f}%")
            if frac >= TWO_CLIQUES_MIN
            else (NOT_SUPPORTED, f"{100 * frac:.1f}% < {100 * TWO_CLIQUES_MIN:.0f}%"),
        ),
    ]
    ours = (
        f"d2 = {_ci_text(two_iv)} points: two large cliques in {100 * frac:.1f}% of graphs vs "
        f"{100 * number(a, 'clique_two_fraction_null', where):.1f}% of their shuffles; modularity excess d1 = "
        f"{_ci_text(q_iv, '{:+.3f}'.format)} (n = {n} sentences, one model)"
    )
    return _result(two_iv, combine(parts, "criteria"), ours, parts=parts)
