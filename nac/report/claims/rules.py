"""The verdict rule (``RULE``, written at the top of ``reports/claims.md``) and its pieces: the
difference, equivalence, non-inferiority and threshold verdicts, ``combine`` for claims made of
several comparisons, and the helpers that turn an interval and a verdict into a claim's result."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from nac.stats import Interval, paired_ci, welch_ci

SUPPORTED, NOT_SUPPORTED, UNDECIDED, NOT_MEASURED = "supported", "not supported", "undecided", "not measured"
VERDICTS = (SUPPORTED, NOT_SUPPORTED, UNDECIDED, NOT_MEASURED)  # the one vocabulary of claims, metrics and report
DELTA = 1.0  # default smallest effect of interest, percentage points

RULE = f"""\
**Verdict rule** (applied by `nac/report/claims/`; the checks run in the order written).

- *95% CIs*: Student t over seeds. A difference of two models trained with the same seeds is
  **paired by seed** (paired t over the per-seed differences): runs that share a seed share the data
  order, the kernel samples' seeds and, between a NAC and its controls, every initial parameter but
  the one the control changes. Welch (unequal variances) only for unpaired designs (unequal seed
  lists). Paired t over episodes for few-shot (NAC and Perceiver IO see the same
  (shots, episode) pairs; the low-shot differences are averaged within each episode first); over CV
  folds for the NLVR kNN accuracy (its half-width combined with the shuffled-label one as the root of
  the sum of squares). n = the smallest sample entering the CI.
- *Difference* ("A beats B", d = mean(A) − mean(B)): **not supported** if the CI upper bound < 0, or
  if the whole CI lies below the smallest effect of interest δ (an effect as large as δ is excluded,
  even when the CI also excludes 0; δ = {DELTA:g} percentage point unless the claim says otherwise);
  else **supported** if the CI lower bound > 0; else **undecided**. n < 2 (no CI): undecided.
- *Equivalence* ("no effect", "similar"): **supported** if the CI of d lies within ±δ; else **not
  supported** if the CI excludes 0; else **undecided**. n < 2: undecided.
- *Non-inferiority* ("A matches B" where being better also counts, e.g. a baseline matching Perceiver IO):
  **supported** if the CI lower bound > −δ; **not supported** if the upper bound < −δ; else **undecided**.
- *Threshold* ("at least x"): **supported** if the CI lower bound ≥ x; **not supported** if the upper
  bound < x; else **undecided**. A single measurement (n = 1) compares its value: supported if
  ≥ x, else not supported. *Above chance* is the strict variant (x = chance): supported if the lower
  bound > chance, not supported if the upper bound ≤ chance (n = 1: the value > chance).
- *Several comparisons in one claim* (all pairs of priors, every model above chance, beats each
  control): each gets a verdict by the rules above; the claim is supported if all are, not supported
  if any is, else undecided.
- *Missing metrics*: **not measured**, reason "not measured: <what is missing>"; inside a claim of
  several comparisons a missing part counts as undecided.
- *δ of an accuracy claim*: never below the noise of one per-seed difference on the test set in use,
  the largest binomial SE of a difference of two accuracies on n items, 100·√(0.5/n) points (2.24 on
  1,000 images): δ = max(the claim's practical threshold, that floor). Each claim's δ line says why.
- *The deciding test*: the test whose verdict is the claim's (the first, in the claim's order); for an
  undecided claim of several, the undecided test that needs the most units. Its interval is the one
  the findings show; the claim's section here lists every test.
- *Power* (reported, never used to decide): of the deciding test, at its n and the standard deviation
  its interval implies: the smallest effect it detects with 80% power (two-sided 0.05; the equivalence
  and non-inferiority margins at 0.025 a side, as the 95% CI reads them), and the units (seeds,
  episodes) at which the effect of interest would be decided: the paper's effect where it gives one,
  else δ (where δ = 0, the effect observed; for a threshold, the estimate's distance from it). An
  undecided verdict says whether it is underpowered (and needs about how many) or lies within δ.
"""


# ---------------------------------------------------------------------------- the rule
def _iv(iv: Interval) -> str:
    return f"[{iv.lo:+.2f}, {iv.hi:+.2f}]"


class Verdict(tuple):
    """A test's ``(verdict, reason)``, unpacked as before, that also keeps what it judged: the
    interval ``iv``, the rule ``kind`` (``difference``, ``equivalence``, ``noninferiority``,
    ``threshold``, ``above``) and its ``target`` (δ, or the threshold x): what the report shows as the
    deciding interval and what the power of the claim is computed from (``nac.report.claims.power``)."""

    def __new__(cls, verdict: str, reason: str, iv: Interval | None = None, kind: str = "", target: float = 0.0):
        self = super().__new__(cls, (verdict, reason))
        self.iv, self.kind, self.target = iv, kind, float(target)
        return self


class Part(tuple):
    """One test of a claim made of several: ``(name, verdict, reason)`` for ``combine``, with its
    ``Verdict``'s interval, kind and target."""

    def __new__(cls, name: str, v: tuple):
        self = super().__new__(cls, (name, v[0], v[1]))
        self.iv, self.kind, self.target = getattr(v, "iv", None), getattr(v, "kind", ""), getattr(v, "target", 0.0)
        return self


def part(name: str, v: tuple) -> Part:
    """``(name, verdict, reason)`` of a test named ``name``, keeping its interval (``Part``)."""
    return Part(name, v)


def difference_verdict(iv: Interval, delta: float = DELTA) -> Verdict:
    return Verdict(*_difference(iv, delta), iv=iv, kind="difference", target=delta)


def _difference(iv: Interval, delta: float) -> tuple[str, str]:
    if not iv.has_ci:
        return UNDECIDED, f"n < 2: no CI (d = {iv.estimate:+.2f} from n = {iv.n})"
    if iv.hi < 0:
        return NOT_SUPPORTED, f"CI upper bound {iv.hi:+.2f} < 0"
    if iv.hi < delta:  # checked before the lower bound: an effect inside (−δ, δ) is too small, even if > 0
        return NOT_SUPPORTED, f"whole CI {_iv(iv)} below δ = {delta:g}: an effect as large as δ is excluded"
    if iv.lo > 0:
        return SUPPORTED, f"CI lower bound {iv.lo:+.2f} > 0"
    return UNDECIDED, f"CI {_iv(iv)} contains 0 and reaches δ = {delta:g}"


def equivalence_verdict(iv: Interval, delta: float = DELTA) -> Verdict:
    return Verdict(*_equivalence(iv, delta), iv=iv, kind="equivalence", target=delta)


def _equivalence(iv: Interval, delta: float) -> tuple[str, str]:
    if not iv.has_ci:
        return UNDECIDED, f"n < 2: no CI (d = {iv.estimate:+.2f} from n = {iv.n})"
    if -delta <= iv.lo and iv.hi <= delta:
        return SUPPORTED, f"CI {_iv(iv)} within ±{delta:g}"
    if iv.lo > 0 or iv.hi < 0:
        return NOT_SUPPORTED, f"CI {_iv(iv)} excludes 0"
    return UNDECIDED, f"CI {_iv(iv)} contains 0 but reaches beyond ±{delta:g}"


def noninferiority_verdict(iv: Interval, delta: float = DELTA) -> Verdict:
    """ "A matches B" read as *not worse by more than δ* (a model that is better also matches):
    supported if the CI lower bound > −δ, not supported if the upper bound < −δ."""
    return Verdict(*_noninferiority(iv, delta), iv=iv, kind="noninferiority", target=delta)


def _noninferiority(iv: Interval, delta: float) -> tuple[str, str]:
    if not iv.has_ci:
        return UNDECIDED, f"n < 2: no CI (d = {iv.estimate:+.2f} from n = {iv.n})"
    if iv.lo > -delta:
        return SUPPORTED, f"CI lower bound {iv.lo:+.2f} > −{delta:g}"
    if iv.hi < -delta:
        return NOT_SUPPORTED, f"CI upper bound {iv.hi:+.2f} < −{delta:g}"
    return UNDECIDED, f"CI {_iv(iv)} contains −{delta:g}"


def threshold_verdict(
    iv: Interval, x: float, strict: bool = False, fmt: Callable[[float], str] = "{:.2f}".format
) -> Verdict:
    """``strict``: the claim is "> x" (above chance) instead of "≥ x"."""
    return Verdict(*_threshold(iv, x, strict, fmt), iv=iv, kind="above" if strict else "threshold", target=x)


def _threshold(iv: Interval, x: float, strict: bool, fmt: Callable[[float], str]) -> tuple[str, str]:
    ge, lt = (">", "≤") if strict else ("≥", "<")
    if not iv.has_ci:
        ok = iv.estimate > x if strict else iv.estimate >= x
        return (
            SUPPORTED if ok else NOT_SUPPORTED
        ), f"single measurement: {fmt(iv.estimate)} {ge if ok else lt} {fmt(x)}"
    if (iv.lo > x) if strict else (iv.lo >= x):
        return SUPPORTED, f"CI lower bound {fmt(iv.lo)} {ge} {fmt(x)}"
    if (iv.hi <= x) if strict else (iv.hi < x):
        return NOT_SUPPORTED, f"CI upper bound {fmt(iv.hi)} {lt} {fmt(x)}"
    return UNDECIDED, f"CI [{fmt(iv.lo)}, {fmt(iv.hi)}] contains {fmt(x)}"


def combine(parts: Sequence[tuple[str, str, str]], what: str = "comparisons") -> tuple[str, str]:
    """Verdict of a claim made of several (name, verdict, reason) parts: supported if all are,
    not supported if any is, else undecided; the reason names the parts that decide."""
    verdicts = [v for _, v, _ in parts]
    if all(v == SUPPORTED for v in verdicts):
        return SUPPORTED, f"all {len(parts)} {what} supported"
    key = NOT_SUPPORTED if NOT_SUPPORTED in verdicts else UNDECIDED
    picked = [(n, r) for n, v, r in parts if v == key]
    if len(picked) > 1 and len({r for _, r in picked}) == 1:
        share = f"all {len(parts)}" if len(picked) == len(parts) else f"{len(picked)} of {len(parts)}"
        return key, f"{key} for {share} {what}: {picked[0][1]}"
    if len(picked) == len(parts) > 2:
        return key, f"{key} for all {len(parts)} {what} (e.g. {picked[0][0]}: {picked[0][1]})"
    if len(picked) > 2:
        return key, (
            f"{key} for {len(picked)} of {len(parts)} {what}: {', '.join(n for n, _ in picked)} "
            f"(e.g. {picked[0][0]}: {picked[0][1]})"
        )
    return key, f"{key}: " + "; ".join(f"{n} ({r})" for n, r in picked)


# ---------------------------------------------------------------------------- a claim's result
def _result(iv: Interval, verdict: tuple, ours: str, threshold: bool = False, parts=None) -> dict:
    """A claim's result: its headline interval ``iv`` (the estimate, CI and n the tables show), the
    verdict and reason, and the tests that made it (``parts``: ``Part``s of ``combine``'s claims; a
    single test's ``Verdict`` otherwise) with the one that decided (``deciding``: the first whose
    verdict is the claim's; its interval is what the findings screen shows)."""
    lo, hi = (iv.lo, iv.hi) if iv.has_ci else ((iv.estimate, iv.estimate) if threshold else (None, None))
    tests = list(parts) if parts is not None else ([Part("", verdict)] if getattr(verdict, "iv", None) else [])
    rows = [_part_row(t) for t in tests]
    deciding = next((r for r in rows if r["verdict"] == verdict[0]), None)
    return {
        "ours": ours,
        "estimate": iv.estimate,
        "lo": lo,
        "hi": hi,
        "n": iv.n,
        "verdict": verdict[0],
        "reason": verdict[1],
        "parts": rows,
        "deciding": deciding,
    }


def _part_row(t: Part) -> dict:
    iv = t.iv
    return {
        "name": t[0],
        "verdict": t[1],
        "reason": t[2],
        "kind": t.kind,
        "target": t.target,
        "estimate": None if iv is None else iv.estimate,
        "lo": None if iv is None or not iv.has_ci else iv.lo,
        "hi": None if iv is None or not iv.has_ci else iv.hi,
        "n": None if iv is None else iv.n,
    }


def _ci_text(iv: Interval, fmt: Callable[[float], str] = "{:+.2f}".format) -> str:
    return f"{fmt(iv.estimate)} [{fmt(iv.lo)}, {fmt(iv.hi)}]" if iv.has_ci else f"{fmt(iv.estimate)} (no CI)"


def seed_ci(a: Sequence[float], b: Sequence[float]) -> Interval:
    """a − b over seeds: paired by seed when both lists cover the same seeds (in order), else Welch."""
    return paired_ci(a, b) if len(a) == len(b) else welch_ci(a, b)


def _diff(
    vals: dict[str, list[float]], a: str, b: str, delta: float = DELTA, equivalence: bool = False, what: str = ""
) -> dict:
    """vals[a] − vals[b] over seeds (``seed_ci``), judged by the difference (or equivalence) rule."""
    iv = seed_ci(vals[a], vals[b])
    ours = f"d = {_ci_text(iv)}; {what}{a} {np.mean(vals[a]):.2f} vs {b} {np.mean(vals[b]):.2f}; n = {iv.n} seed(s)"
    return _result(iv, (equivalence_verdict if equivalence else difference_verdict)(iv, delta), ours)


# ---------------------------------------------------------------------------- words the claims' measures share
PAIRED = "paired-by-seed 95% CI"
