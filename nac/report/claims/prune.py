"""Claims on dropping modules (Figures 5a, 5b, 15): the fraction that can be dropped, the speed-up,
NAC vs Perceiver IO, and connectivity ranking vs random orders."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nac.report.claims.metrics import PIO, Missing
from nac.report.claims.registry import Context, claim
from nac.report.claims.rules import D1, PAIRED, _ci_text, _diff, _result, difference_verdict, threshold_verdict
from nac.stats import mean_ci, paired_ci

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


@claim(
    "prune_fraction",
    source="abstract, §4.1 (Fig. 5a)",
    statement="More than 80% of the modules can be dropped at < 3 points loss",
    paper="> 0.8 of modules dropped",
    measure=lambda c: (
        f"per seed, the largest dropped fraction of {c.head} (scanning upwards, stopping at the first "
        f"failure) with Acc@1 ≥ full − {PRUNE_MAX_LOSS:g}; t CI over seeds; threshold 0.8"
    ),
)
def prune_fraction(c: Context) -> dict:
    fr = [max_fraction_within(c.m.prune_curve(c.head, s))["dropped_fraction"] for s in c.m.seeds]
    iv = mean_ci(fr)
    f3 = "{:.3f}".format
    ours = f"{_ci_text(iv, f3)}; per seed {', '.join(f'{f:g}' for f in fr)}; n = {iv.n} seed(s)"
    return _result(iv, threshold_verdict(iv, 0.8, fmt=f3), ours, threshold=True)


@claim(
    "prune_speedup",
    source="abstract, §4.1 (Fig. 5b)",
    statement="~8x inference speed-up at < 3 points loss",
    paper="~8×",
    measure=lambda c: (
        f"images/s of {c.head} (first seed) at the fraction of prune_fraction ÷ at "
        "fraction 0; threshold 8 (single measurement)"
    ),
)
def prune_speedup(c: Context) -> dict:
    curve = c.m.prune_curve(c.head, c.m.seeds[0])
    best, where = max_fraction_within(curve), f"{c.m.label('image/prune.json')} ({c.head} seed {c.m.seeds[0]})"
    if not isinstance(best.get("images_per_s"), list) or not isinstance(curve[0].get("images_per_s"), list):
        raise Missing(f"repeated timings (images_per_s lists) in {where}")
    full = float(np.mean(curve[0]["images_per_s"]))
    iv = mean_ci([float(v) / full for v in best["images_per_s"]])
    ours = (
        f"{_ci_text(iv, '{:.2f}×'.format)} at dropped fraction {best['dropped_fraction']:g} "
        f"({curve[0].get('device', '?')}; CI over {iv.n} timed repeats)"
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
        f"largest ≤ it measured); {PAIRED}; {D1}"
    ),
)
def prune_vs_pio(c: Context) -> dict:
    head, seeds = c.head, c.m.seeds
    curves = {(run, s): c.m.prune_curve(run, s) for run in (PIO, head) for s in seeds}
    f = _largest_common_fraction(curves.values(), PRUNE_COMPARE_AT, f"{PIO} and {head}")
    at = lambda cv: next(r["acc1"] for r in cv if r["dropped_fraction"] == f)
    loss = {run: [curves[run, s][0]["acc1"] - at(curves[run, s]) for s in seeds] for run in (PIO, head)}
    return _diff(loss, PIO, head, what=f"Acc@1 loss at dropped fraction {f:g}: ")


@claim(
    "prune_vs_random",
    source="§4.1 (Fig. 5a)",
    statement="Connectivity ranking beats random ranking when dropping modules",
    paper="implied (modules are dropped least connected first)",
    measure=lambda c: (
        f"d = Acc@1 of {c.head} at dropped fraction {PRUNE_CONTROL_AT:g} (or the largest ≤ it), least "
        f"connected first − mean over random orders; paired-by-seed CI; {D1}"
    ),
)
def prune_vs_random(c: Context) -> dict:
    head, seeds = c.head, c.m.seeds
    k = int(c.params.get("prune", {}).get("random_orders", 0))
    if k < 1:
        raise Missing("random-order control (prune.random_orders: 0)")
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
    return _result(iv, difference_verdict(iv), ours)
