"""How much evidence a verdict has (issue 46): for the test that decided a claim, its n, the smallest
effect it detects at that n and the n at which the effect of interest would be decided, at the
variance observed.

Every test of the verdict rule reads a 95% Student t interval over n units (seeds, episodes), so the
standard deviation of one unit's value is recovered from the interval: ``SD = half-width x sqrt(n) /
t(0.975, n - 1)`` (exact for the paired and one-sample intervals; for Welch's, unequal seed lists, an
approximation). Power is then the claim's own test's, by statsmodels (``TTestPower``: the paired or
one-sample t test) and scipy (the noncentral t, for the two one-sided tests of an equivalence):

- *difference* (and *threshold*, the distance from x): two-sided at 0.05 (its far tail left out), 80% power;
- *non-inferiority*: one-sided at 0.025 (the rule's 95% lower bound against −δ), true difference 0;
- *equivalence*: both one-sided tests at 0.025 (the 95% CI inside ±δ), true difference 0.

The effect of interest: the paper's effect where the claim has one (``effect=`` in the registry),
else δ (equivalence, non-inferiority: the margin; difference: the smallest effect of interest; where
δ = 0, any difference counting, the effect observed), and for a threshold the distance of the
estimate from x. An undecided verdict says which it is:
``underpowered`` (with about how many units would decide it), or that the effect lies within δ.
A test with no interval (n < 2, a single measurement) has no power to report: it says so."""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, stats
from statsmodels.stats.power import TTestPower

from nac.report.claims.rules import UNDECIDED

POWER, ALPHA = 0.8, 0.05
MAX_N = 100_000  # beyond this many units a claim is called out of reach


def sd_of(estimate: float, lo: float, hi: float, n: int) -> float | None:
    """One unit's standard deviation behind a 95% t interval ``[lo, hi]`` over ``n`` units."""
    if n is None or n < 2 or lo is None or hi is None:
        return None
    return (hi - lo) / 2 * math.sqrt(n) / stats.t.ppf(0.975, n - 1)


def _tost_power(margin: float, sd: float, n: float, true: float = 0.0) -> float:
    """The power of the two one-sided tests (each at 0.025) of ``|d| < margin``, noncentral t."""
    if sd <= 0:
        return 1.0 if abs(true) < margin else 0.0
    df, crit, se = n - 1, stats.t.ppf(1 - ALPHA / 2, n - 1), sd / math.sqrt(n)
    lower = stats.nct.sf(crit, df, (true + margin) / se)  # H0: d <= -margin rejected
    upper = stats.nct.sf(crit, df, (margin - true) / se)  # H0: d >= margin rejected
    return max(0.0, lower + upper - 1.0)


def _one_sided(effect: float, sd: float, n: float) -> float:
    return TTestPower().power(effect_size=effect / sd, nobs=n, alpha=ALPHA / 2, alternative="larger")


def _two_sided(effect: float, sd: float, n: float) -> float:
    """The two-sided test's power, its far tail (a rejection on the wrong side) left out: the one-sided
    test at ALPHA / 2 (statsmodels' two-sided form returns NaN at n = 2 for moderate effects; the far
    tail is below 1e-8 wherever the power is near 80%)."""
    return TTestPower().power(effect_size=abs(effect) / sd, nobs=n, alpha=ALPHA / 2, alternative="larger")


def power_at(kind: str, effect: float, sd: float, n: float) -> float:
    """The probability that the ``kind`` test decides ``effect`` with ``n`` units of standard deviation ``sd``
    (an effect of many standard errors, where the noncentral t's tail underflows to NaN, is decided: 1)."""
    if kind == "equivalence":
        got = _tost_power(effect, sd, n)
    elif kind == "noninferiority":
        got = _one_sided(effect, sd, n)
    else:
        got = _two_sided(effect, sd, n)
    if not np.isfinite(got):  # the noncentral t's tail underflows: decided only far above the critical value
        crit = stats.t.ppf(1 - ALPHA / 2, n - 1)
        return 1.0 if abs(effect) / sd * math.sqrt(n) > 2 * crit else 0.0
    return float(got)


def _bracket(f, lo: float, hi: float, limit: float) -> float | None:
    """The root of the increasing ``f`` (power - 0.8) above ``lo``: ``hi`` doubled until ``f(hi) >= 0``
    (None past ``limit``), then brentq."""
    while f(hi) < 0:
        lo, hi = hi, 2 * hi
        if hi > limit:
            return None
    return float(optimize.brentq(f, lo, hi))


def detectable(kind: str, sd: float, n: int) -> float:
    """The smallest effect (margin, for equivalence and non-inferiority) decided with 80% power at ``n``."""
    if sd == 0:
        return 0.0
    got = _bracket(lambda e: power_at(kind, e, sd, n) - POWER, 1e-9 * sd, sd, 1e6 * sd)
    return math.inf if got is None else got


def needed(kind: str, effect: float, sd: float) -> float:
    """The units at which the ``kind`` test decides ``effect`` with 80% power (inf: out of reach)."""
    if effect <= 0:
        return math.inf
    if sd == 0 or power_at(kind, effect, sd, 2.0) >= POWER:
        return 2.0
    got = _bracket(lambda n: power_at(kind, effect, sd, n) - POWER, 2.0, 4.0, MAX_N)
    return math.inf if got is None else got


def of_test(test: dict, paper_effect: float | None = None) -> dict:
    """The power of one test (a result's ``parts`` entry): ``n``, ``sd``, ``detectable``, ``effect``
    (and where it comes from), ``needed`` (units, rounded up), and ``note`` when nothing can be said."""
    est, lo, hi, n, kind, target = (test.get(k) for k in ("estimate", "lo", "hi", "n", "kind", "target"))
    out = {"n": n, "kind": kind}
    sd = sd_of(est, lo, hi, n) if est is not None else None
    if sd is None or not kind:
        out["note"] = "no interval (a single measurement or n < 2): no power to compute"
        return out
    rule = "difference" if kind in ("threshold", "above") else kind
    if kind in ("threshold", "above"):
        effect, source = abs(est - target), "the estimate's distance from the threshold"
    elif kind == "difference" and paper_effect is not None and paper_effect > 0:
        effect, source = float(paper_effect), "the paper's effect"
    elif target:
        effect, source = float(target), "δ"
    else:  # δ = 0 (any difference counts): the effect observed (post hoc: a function of the p-value)
        effect, source = abs(float(est)), "the observed effect (post hoc)"
    out.update(sd=sd, detectable=detectable(rule, sd, n), effect=effect, effect_from=source)
    need = needed(rule, effect, sd)
    out["needed"] = None if not np.isfinite(need) else int(math.ceil(need))
    return out


def undecided_why(row: dict, power: dict) -> str:
    """``underpowered (needs about N)`` or ``the effect lies within δ``, for an undecided verdict."""
    test = row.get("deciding") or {}
    kind, target, est = test.get("kind"), test.get("target"), test.get("estimate")
    if kind in ("difference", "equivalence") and est is not None and target and abs(est) < target:
        within = f"the estimate {est:+.2f} lies within δ = {target:g}; "
    else:
        within = ""
    if power.get("note"):
        return within + "no interval: more units would decide it"
    need = power.get("needed")
    if need is None:
        return within + f"underpowered: {power['effect_from']} ({power['effect']:.3g}) is out of reach at this variance"
    return within + f"underpowered: needs about {need} units to decide {power['effect_from']} ({power['effect']:.3g})"


def annotate(row: dict, paper_effect: float | None = None) -> dict:
    """``row`` (a claim's result) with ``power`` (``of_test`` of the deciding test; for an undecided
    claim of several tests, the undecided test that needs the most units) and, when undecided, why."""
    parts = [p for p in row.get("parts") or [] if p.get("kind")]
    if not parts:
        row["power"] = {"note": "no test interval to compute power from"}
        return row
    deciding = row.get("deciding") or parts[0]
    power = of_test(deciding, paper_effect if deciding is parts[0] else None)
    if row["verdict"] == UNDECIDED:
        undecided = [p for p in parts if p["verdict"] == UNDECIDED]
        if undecided:  # (an undecided part with no interval, an emptied graph say, stays the deciding one)
            pw = [(of_test(p, paper_effect if p is parts[0] else None), p) for p in undecided]
            power, test = max(pw, key=lambda t: math.inf if t[0].get("needed") is None else t[0]["needed"])
            row["deciding"] = test
        power["why"] = undecided_why(row, power)
    row["power"] = power
    return row


def power_text(power: dict, unit: str = "") -> str:
    """One line: ``n = 5; detects >= 12.1 at 80% power; the paper's effect (1.95) needs about 56``."""
    if not power or power.get("note"):
        return (power or {}).get("note", "")
    det = power["detectable"]
    det_text = "nothing" if not np.isfinite(det) else f"{det:.3g}{unit}"
    need = power.get("needed")
    need_text = "out of reach" if need is None else f"about {need}"
    return (
        f"n = {power['n']}; detects {det_text} at 80% power; {power['effect_from']} ({power['effect']:.3g}{unit}) "
        f"needs {need_text}"
    )
