"""Claims on dropping modules (Figures 5a, 5b, 15): the fraction that can be dropped, the speed-up,
NAC vs Perceiver IO, and connectivity ranking vs random orders."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nac.pipeline import paths
from nac.report.claims.deltas import accuracy_delta, delta_line
from nac.report.claims.metrics import PIO, Missing
from nac.report.claims.registry import Context, claim
from nac.report.claims.rules import (
    PAIRED,
    _ci_text,
    _diff,
    _result,
    combine,
    difference_verdict,
    part,
    threshold_verdict,
)
from nac.stats import mean_ci, paired_ci

# Figure 5b at the paper's size (the throughput stage), relative to the metrics root
PAPER_THROUGHPUT = paths.PAPER_THROUGHPUT.as_posix()
PRUNE_MAX_LOSS = 3.0  # "losing less than 3 percent"
PRUNE_COMPARE_AT = 0.75  # dropped fraction at which NAC and PIO degradation are compared
PRUNE_CONTROL_AT = 0.875  # dropped fraction at which connectivity ranking meets the random-order control


def max_fraction_within(curve: Sequence[dict], max_loss: float = PRUNE_MAX_LOSS) -> dict:
    """Scanning dropped fractions upwards, the last row whose acc1 ≥ full acc1 − max_loss before
    the first that falls below it (the row of fraction 0 if the first drop already fails)."""
    full, best = curve[0]["acc1"], curve[0]
    for r in curve:
        if r["acc1"] < full - max_loss:
            break
        best = r
    return best


def _random_orders(c: Context) -> int:
    k = int(c.params.get("prune", {}).get("random_orders", 0))
    if k < 1:
        raise Missing("random-order control (prune.random_orders: 0)")
    return k


@claim(
    "prune_fraction",
    source="abstract, §4.1 (Fig. 5a)",
    statement="More than 80% of the modules can be dropped at < 3 points loss",
    paper="> 0.8 of modules dropped",
    measure=lambda c: (
        f"per seed, the largest dropped fraction of {c.head} (scanning upwards, stopping at the first "
        f"failure) with Acc@1 ≥ full − {PRUNE_MAX_LOSS:g}; t CI over seeds; threshold 0.8; and the ranking "
        f"by connectivity must do it better than the trivial ranking: d = that fraction − the same fraction "
        f"with modules dropped in random orders (mean over orders), paired by seed, > 0 (a graph with nothing "
        f"to rank, or a task any subset solves, drops as many modules at random); both"
    ),
    delta="the threshold 0.8 is the paper's claim; δ = 0 for ranked − random (a share of modules, each seed's "
    "already read against the 3-point accuracy loss)",
)
def prune_fraction(c: Context) -> dict:
    k = _random_orders(c)
    frac = lambda run, s, order="connectivity": max_fraction_within(c.m.prune_curve(run, s, order))["dropped_fraction"]
    fr = [frac(c.head, s) for s in c.m.seeds]
    rnd = [float(np.mean([frac(c.head, s, f"random-{i}") for i in range(k)])) for s in c.m.seeds]
    iv, ctrl = mean_ci(fr), paired_ci(fr, rnd)
    f3 = "{:.3f}".format
    parts = [
        part("more than 80% dropped", threshold_verdict(iv, 0.8, fmt=f3)),
        part("connectivity ranking beats random orders", difference_verdict(ctrl, delta=0.0)),
    ]
    others = []
    for run in ("modfc", "frozen_graph"):
        if run in c.params.get("prune", {}).get("runs", []):
            try:
                others.append(f"{run} {np.mean([frac(run, s) for s in c.m.seeds]):.3f}")
            except Missing:
                pass
    ours = (
        f"{_ci_text(iv, f3)}; per seed {', '.join(f'{f:g}' for f in fr)}; random orders "
        f"{', '.join(f'{f:.3f}' for f in rnd)}, ranked − random {_ci_text(ctrl, f3)}"
        + (f"; without a learned graph: {', '.join(others)}" if others else "")
        + f"; n = {iv.n} seed(s)"
    )
    return _result(iv, combine(parts, "criteria"), ours, threshold=True, parts=parts)


def paper_size_speedup(c: Context, fraction: float):
    """The whole-model speed-up measured at the paper's size (the ``throughput`` stage) at
    ``fraction``: ``(Interval over timed repeats, row)``; Missing if not measured there."""
    try:
        data = c.m.json(PAPER_THROUGHPUT).get("figure5b_paper_size") or {}
    except Missing:
        raise Missing(f"{c.m.label(PAPER_THROUGHPUT)}, the paper-size timings (dvc repro throughput)") from None
    rows = {float(r["dropped_fraction"]): r for r in data.get("rows", [])}
    if 0.0 not in rows or fraction not in rows:
        raise Missing(f"dropped fraction {fraction:g} in {c.m.label(PAPER_THROUGHPUT)} (prune.dropped_fraction)")
    full = float(np.mean(rows[0.0]["whole_images_per_s"]["values"]))
    return mean_ci([float(v) / full for v in rows[fraction]["whole_images_per_s"]["values"]]), data


@claim(
    "prune_speedup",
    source="abstract, §4.1 (Fig. 5b)",
    statement="~8x inference speed-up at < 3 points loss",
    paper="~8×",
    measure=lambda c: (
        f"the whole model's images/s at the paper's size (256 modules, Tiny-ImageNet input; "
        f"{PAPER_THROUGHPUT}, CI over timed repeats) at the dropped fraction of prune_fraction ({c.head}, "
        "first seed) ÷ at fraction 0; threshold 8. The mini model's own timing (32 modules: the dropped modules "
        "are a small share of its cost) is shown beside it, labelled, and not judged"
    ),
    delta="the threshold 8 is the paper's ~8x; a timing's CI over repeats, no test set",
)
def prune_speedup(c: Context) -> dict:
    curve = c.m.prune_curve(c.head, c.m.seeds[0])
    best, where = max_fraction_within(curve), f"{c.m.label('image/prune.json')} ({c.head} seed {c.m.seeds[0]})"
    f = float(best["dropped_fraction"])
    iv, data = paper_size_speedup(c, f)
    mini = ""
    if isinstance(best.get("images_per_s"), list) and isinstance(curve[0].get("images_per_s"), list):
        full = float(np.mean(curve[0]["images_per_s"]))
        mini_iv = mean_ci([float(v) / full for v in best["images_per_s"]])
        mini = f"; mini model's own timing (not judged): {_ci_text(mini_iv, '{:.2f}×'.format)} ({where})"
    ours = (
        f"paper size: {_ci_text(iv, '{:.2f}×'.format)} at dropped fraction {f:g} "
        f"({data.get('n_processor', '?')} modules, batch {data.get('batch', '?')}, CI over {iv.n} timed repeats)" + mini
    )
    return _result(iv, threshold_verdict(iv, 8.0, fmt="{:.2f}×".format), ours, threshold=True)


def _largest_common_fraction(curves, at_most: float, whose: str) -> float:
    """The largest dropped fraction in (0, ``at_most``] that every prune curve measured."""
    common = set.intersection(*({r["dropped_fraction"] for r in cv} for cv in curves))
    cand = [f for f in common if 0.0 < f <= at_most]
    if not cand:
        raise Missing(f"a dropped fraction in (0, {at_most:g}] common to {whose} in prune.json")
    return max(cand)


@claim(
    "prune_vs_pio",
    source="§4.1 (Fig. 5a, 15)",
    statement="NACs degrade more gracefully than Perceiver IO when dropping modules",
    paper="no number (NAC stays above PIO beyond 80% dropped)",
    measure=lambda c: (
        f"d = Acc@1 loss of {PIO} − loss of {c.head} at dropped fraction {PRUNE_COMPARE_AT:g} (or the "
        f"largest ≤ it measured); {PAIRED}; δ = {accuracy_delta(c.params, 'iid'):g}"
    ),
    delta=lambda c: delta_line(c.params, "iid", why="a practical threshold (the paper gives no number)"),
)
def prune_vs_pio(c: Context) -> dict:
    head, seeds = c.head, c.m.seeds
    curves = {(run, s): c.m.prune_curve(run, s) for run in (PIO, head) for s in seeds}
    f = _largest_common_fraction(curves.values(), PRUNE_COMPARE_AT, f"{PIO} and {head}")
    at = lambda cv: next(r["acc1"] for r in cv if r["dropped_fraction"] == f)
    loss = {run: [curves[run, s][0]["acc1"] - at(curves[run, s]) for s in seeds] for run in (PIO, head)}
    return _diff(loss, PIO, head, delta=accuracy_delta(c.params, "iid"), what=f"Acc@1 loss at dropped fraction {f:g}: ")


@claim(
    "prune_vs_random",
    source="§4.1 (Fig. 5a)",
    statement="Connectivity ranking beats random ranking when dropping modules",
    paper="implied (modules are dropped least connected first)",
    measure=lambda c: (
        f"d = Acc@1 of {c.head} at dropped fraction {PRUNE_CONTROL_AT:g} (or the largest ≤ it), least "
        f"connected first − mean over random orders; paired-by-seed CI; δ = {accuracy_delta(c.params, 'iid'):g}"
    ),
    delta=lambda c: delta_line(c.params, "iid", why="a practical threshold (the paper gives no number)"),
)
def prune_vs_random(c: Context) -> dict:
    head, seeds = c.head, c.m.seeds
    k = _random_orders(c)
    curves = [
        c.m.prune_curve(head, s, order) for s in seeds for order in ("connectivity", *(f"random-{i}" for i in range(k)))
    ]
    f = _largest_common_fraction(curves, PRUNE_CONTROL_AT, f"every seed and order of {head}")
    at = lambda cv: next(r["acc1"] for r in cv if r["dropped_fraction"] == f)
    a = [at(c.m.prune_curve(head, s)) for s in seeds]
    b = [float(np.mean([at(c.m.prune_curve(head, s, f"random-{i}")) for i in range(k)])) for s in seeds]
    iv = paired_ci(a, b)
    ours = (
        f"Acc@1 at dropped fraction {f:g}: connectivity {np.mean(a):.2f} vs random orders {np.mean(b):.2f}, "
        f"d = {_ci_text(iv)}; n = {iv.n} seed(s), {k} random orders each"
    )
    return _result(iv, difference_verdict(iv, accuracy_delta(c.params, "iid")), ours)
