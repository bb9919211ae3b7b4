"""Confidence intervals, the one place they are computed (report tables and figures, claims'
verdicts, the NLVR analysis, benchmarks): a mean with a one-sample Student t CI (``mean_ci``,
``summarize``), a Welch CI for a difference of means, a paired t CI, and the binomial SE of one accuracy."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class Interval:
    """An estimate with its 95% CI (``lo``/``hi`` None where there is none) and sample size."""

    estimate: float
    lo: float | None
    hi: float | None
    n: int

    @property
    def has_ci(self) -> bool:
        return self.n >= 2 and self.lo is not None and self.hi is not None


def t_half_width(values: Sequence[float]) -> float:
    """Half-width of the one-sample 95% Student t CI of the mean; 0 for fewer than 2 values. The
    textbook formula rather than scipy's ``ttest_1samp``, which warns (and may round badly) on
    near-constant samples such as relative accuracies at 0% dropped; equal otherwise (tests)."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return 0.0
    return float(stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x)))


def mean_ci(values: Sequence[float]) -> Interval:
    """Mean with a one-sample Student t CI (``t_half_width``); fewer than 2 values: no CI (lo = hi = None)."""
    x = np.asarray(values, dtype=float)
    if len(x) == 0:
        raise ValueError("mean_ci of no values")
    mean = float(x.mean())
    if len(x) < 2:
        return Interval(mean, None, None, len(x))
    half = t_half_width(x)
    return Interval(mean, mean - half, mean + half, len(x))


def summarize(values: Sequence[float]) -> dict[str, float]:
    """Mean and 95% confidence half-width (Student t over seeds; 0 for a single seed), as the
    report's tables print them."""
    arr = np.asarray(values, dtype=float)
    return {"mean": float(arr.mean()), "ci95": t_half_width(arr), "n": int(len(arr))}


def _interval(estimate: float, ci, n: int) -> Interval:
    return Interval(estimate, float(ci.low), float(ci.high), n)


def welch_ci(a: Sequence[float], b: Sequence[float]) -> Interval:
    """mean(a) − mean(b) with a Welch (unequal variances, Satterthwaite df) CI, scipy's
    ``ttest_ind(a, b, equal_var=False)``; n = min(|a|, |b|). Every function here returns a − b."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    d, n = float(a.mean() - b.mean()), min(len(a), len(b))
    if n < 2:
        return Interval(d, None, None, n)
    if not (a.std() > 0 or b.std() > 0):  # no spread at all: the interval is the point (scipy: nan)
        return Interval(d, d, d, n)
    with warnings.catch_warnings():  # near-constant samples: scipy warns of precision loss, the CI stands
        warnings.simplefilter("ignore", RuntimeWarning)
        return _interval(d, stats.ttest_ind(a, b, equal_var=False).confidence_interval(), n)


def paired_ci(a: Sequence[float], b: Sequence[float]) -> Interval:
    """Mean of the paired differences a − b with a paired t CI (scipy's ``ttest_rel(a, b)``)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired_ci needs equally long samples, got {len(a)} and {len(b)}")
    return mean_ci(a - b)


def binomial_se(acc: float, n: int) -> float:
    """The binomial standard error, in points, of an accuracy ``acc`` (percent) measured on ``n``
    independent test items: ``100 sqrt(p (1 - p) / n)``, p = acc / 100. The part of a run's accuracy
    that the test set's size alone makes uncertain, beside the seeds' spread."""
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise ValueError(f"binomial_se: n must be a positive count of test items, got {n!r}")
    if not 0.0 <= acc <= 100.0:
        raise ValueError(f"binomial_se: acc must be a percentage in [0, 100], got {acc!r}")
    p = acc / 100.0
    return 100.0 * float(np.sqrt(p * (1.0 - p) / int(n)))
