"""The paper's claims (abstract, sections 4.1-4.4), each checked against our metrics by one
stated verdict rule (``RULE``, written at the top of ``reports/claims.md``).

Public API:

- ``CLAIM_IDS``: the ids of the target-independent claims, in report order.
- ``claim_ids(params)``: **every** claim id for a profile, in report order: ``CLAIM_IDS`` with
  one ``fewshot_<target>`` per ``params["fewshot"]["targets"]`` inserted after ``prune_vs_random``.
  Tests (and the pipeline test) should use this one: ``evaluate_claims`` returns exactly these
  ids, in this order.
- ``evaluate_claims(params, metrics)``: one dict per claim with the keys of ``FIELDS``.
- ``write_claims(params, metrics, out)``: writes ``out/claims.md`` and ``out/tables/claims.csv``.
- The rule's pieces, usable on their own: ``mean_ci``, ``welch_ci``, ``paired_ci`` (95% CIs) and
  ``difference_verdict``, ``equivalence_verdict``, ``threshold_verdict``, ``combine``.

Only the runs, seeds and targets named in ``params`` are read. A missing metrics file gives the
claim the verdict "inconclusive" with the reason "not measured: <what is missing>"; a malformed one
(bad JSON, a missing key, a non-numeric value, unpaired few-shot episodes) raises ``ValueError``.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nac.graphs import PRIORS
from nac.report.published import TABLE1
from nac.stats import Interval, mean_ci, paired_ci, welch_ci

SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE = "supported", "not supported", "inconclusive"
DELTA = 1.0                 # default smallest effect of interest, percentage points
PRUNE_MAX_LOSS = 3.0        # "losing less than 3 percent"
PRUNE_COMPARE_AT = 0.75     # dropped fraction at which NAC and PIO degradation are compared
MN_COLLAPSE = 1.5           # exp(selection entropy) a layer must keep: 1 = all examples on one module
PRUNE_CONTROL_AT = 0.875    # dropped fraction at which connectivity ranking meets the random-order control
LOW_SHOTS = 4               # the "low-shot regime": 1-4 shots per class
SPREAD_MIN = 0.10           # fraction of sentences whose 0.5-cut graph must differ from the most common one
ZERO_SHOT_RUN = "zero_shot"  # an nlvr run of that name, if ever configured, is the zero-shot row
PIO, NAC = "perceiver_io", "nac"
NLVR_CONTROLS = ("text_only", "image_only")
FIELDS = ("id", "source", "claim", "paper", "measure", "ours", "estimate", "lo", "hi", "n", "verdict", "reason")
FEWSHOT_TARGETS = {"digits": "digits (stand-in for CIFAR)", "shapes_novel": "novel shapes (stand-in for CUB)",
                   "cifar10": "CIFAR-10", "cub": "CUB-200-2011"}

CLAIM_IDS: tuple[str, ...] = (
    "ood_gain", "iid_gain", "modfc_alone", "learned_graph", "priors_similar", "prior_tradeoff_ood",
    "graph_follows_prior", "regularizer_sparse", "prior_beyond_init", "kernel_matters",
    "prune_fraction", "prune_speedup", "prune_vs_pio", "prune_vs_random",
    "points_gap", "listops_gap", "text_gap", "above_chance",
    "nlvr_vs_zeroshot", "nlvr_uses_both", "nlvr_type_structure", "nlvr_diversity",
    "nlvr_two_cliques", "ni_matches_pio", "ni_fewshot", "mn_specialise", "mn_no_collapse",
)

RULE = f"""\
**Verdict rule** (applied by `nac/report/claims.py`; the checks run in the order written).

- *95% CIs*: Student t over seeds. A difference of two models trained with the same seeds is
  **paired by seed** (paired t over the per-seed differences): runs that share a seed share the data
  order, the kernel samples' seeds and, between a NAC and its controls, every initial parameter but
  the one the control changes. Welch (unequal variances) only for unpaired designs (unequal seed
  lists). Paired t over episodes for few-shot (NAC and Perceiver IO see the same
  (shots, episode) pairs; the low-shot differences are averaged within each episode first); over CV
  folds for the NLVR kNN accuracy (its half-width combined with the shuffled-label one as the root of
  the sum of squares). n = the smallest sample entering the CI.
- *Difference* ("A beats B", d = mean(A) − mean(B)): **supported** if the CI lower bound > 0;
  else **not supported** if the CI upper bound < 0, or if the whole CI lies below the smallest effect
  of interest δ (an effect as large as δ is excluded; δ = {DELTA:g} percentage point unless the claim
  says otherwise); else **inconclusive**. n < 2 (no CI): inconclusive.
- *Equivalence* ("no effect", "similar"): **supported** if the CI of d lies within ±δ; else **not
  supported** if the CI excludes 0; else **inconclusive**. n < 2: inconclusive.
- *Non-inferiority* ("A matches B" where being better also counts, e.g. a baseline matching Perceiver IO):
  **supported** if the CI lower bound > −δ; **not supported** if the upper bound < −δ; else **inconclusive**.
- *Threshold* ("at least x"): **supported** if the CI lower bound ≥ x; **not supported** if the upper
  bound < x; else **inconclusive**. A single measurement (n = 1) compares its value: supported if
  ≥ x, else not supported. *Above chance* is the strict variant (x = chance): supported if the lower
  bound > chance, not supported if the upper bound ≤ chance (n = 1: the value > chance).
- *Several comparisons in one claim* (all pairs of priors, every model above chance, beats each
  control): each gets a verdict by the rules above; the claim is supported if all are, not supported
  if any is, else inconclusive.
- *Missing metrics*: inconclusive, reason "not measured: <what is missing>".
"""


# ---------------------------------------------------------------------------- the rule
def _iv(iv: Interval) -> str:
    return f"[{iv.lo:+.2f}, {iv.hi:+.2f}]"


def difference_verdict(iv: Interval, delta: float = DELTA) -> tuple[str, str]:
    if not iv.has_ci:
        return INCONCLUSIVE, f"n < 2: no CI (d = {iv.estimate:+.2f} from n = {iv.n})"
    if iv.lo > 0:
        return SUPPORTED, f"CI lower bound {iv.lo:+.2f} > 0"
    if iv.hi < 0:
        return NOT_SUPPORTED, f"CI upper bound {iv.hi:+.2f} < 0"
    if iv.hi < delta:
        return NOT_SUPPORTED, f"whole CI {_iv(iv)} below δ = {delta:g}: an effect as large as δ is excluded"
    return INCONCLUSIVE, f"CI {_iv(iv)} contains 0 and reaches δ = {delta:g}"


def equivalence_verdict(iv: Interval, delta: float = DELTA) -> tuple[str, str]:
    if not iv.has_ci:
        return INCONCLUSIVE, f"n < 2: no CI (d = {iv.estimate:+.2f} from n = {iv.n})"
    if -delta <= iv.lo and iv.hi <= delta:
        return SUPPORTED, f"CI {_iv(iv)} within ±{delta:g}"
    if iv.lo > 0 or iv.hi < 0:
        return NOT_SUPPORTED, f"CI {_iv(iv)} excludes 0"
    return INCONCLUSIVE, f"CI {_iv(iv)} contains 0 but reaches beyond ±{delta:g}"


def noninferiority_verdict(iv: Interval, delta: float = DELTA) -> tuple[str, str]:
    """"A matches B" read as *not worse by more than δ* (a model that is better also matches):
    supported if the CI lower bound > −δ, not supported if the upper bound < −δ."""
    if not iv.has_ci:
        return INCONCLUSIVE, f"n < 2: no CI (d = {iv.estimate:+.2f} from n = {iv.n})"
    if iv.lo > -delta:
        return SUPPORTED, f"CI lower bound {iv.lo:+.2f} > −{delta:g}"
    if iv.hi < -delta:
        return NOT_SUPPORTED, f"CI upper bound {iv.hi:+.2f} < −{delta:g}"
    return INCONCLUSIVE, f"CI {_iv(iv)} contains −{delta:g}"


def threshold_verdict(iv: Interval, x: float, strict: bool = False,
                      fmt: Callable[[float], str] = "{:.2f}".format) -> tuple[str, str]:
    """``strict``: the claim is "> x" (above chance) instead of "≥ x"."""
    ge, lt = (">", "≤") if strict else ("≥", "<")
    if not iv.has_ci:
        ok = iv.estimate > x if strict else iv.estimate >= x
        return (SUPPORTED if ok else NOT_SUPPORTED), f"single measurement: {fmt(iv.estimate)} {ge if ok else lt} {fmt(x)}"
    if (iv.lo > x) if strict else (iv.lo >= x):
        return SUPPORTED, f"CI lower bound {fmt(iv.lo)} {ge} {fmt(x)}"
    if (iv.hi <= x) if strict else (iv.hi < x):
        return NOT_SUPPORTED, f"CI upper bound {fmt(iv.hi)} {lt} {fmt(x)}"
    return INCONCLUSIVE, f"CI [{fmt(iv.lo)}, {fmt(iv.hi)}] contains {fmt(x)}"


def combine(parts: Sequence[tuple[str, str, str]], what: str = "comparisons") -> tuple[str, str]:
    """Verdict of a claim made of several (name, verdict, reason) parts: supported if all are,
    not supported if any is, else inconclusive; the reason names the parts that decide."""
    verdicts = [v for _, v, _ in parts]
    if all(v == SUPPORTED for v in verdicts):
        return SUPPORTED, f"all {len(parts)} {what} supported"
    key = NOT_SUPPORTED if NOT_SUPPORTED in verdicts else INCONCLUSIVE
    picked = [(n, r) for n, v, r in parts if v == key]
    if len(picked) > 1 and len({r for _, r in picked}) == 1:
        share = f"all {len(parts)}" if len(picked) == len(parts) else f"{len(picked)} of {len(parts)}"
        return key, f"{key} for {share} {what}: {picked[0][1]}"
    if len(picked) == len(parts) > 2:
        return key, f"{key} for all {len(parts)} {what} (e.g. {picked[0][0]}: {picked[0][1]})"
    if len(picked) > 2:
        return key, (f"{key} for {len(picked)} of {len(parts)} {what}: {', '.join(n for n, _ in picked)} "
                     f"(e.g. {picked[0][0]}: {picked[0][1]})")
    return key, f"{key}: " + "; ".join(f"{n} ({r})" for n, r in picked)


# ---------------------------------------------------------------------------- reading metrics
class _Missing(Exception):
    """A metrics file (or the part of one a claim needs) does not exist: 'not measured'."""


def _number(obj: dict, key: str, where: str) -> float:
    if not isinstance(obj, dict) or key not in obj:
        raise ValueError(f"malformed metrics {where}: no key {key!r}")
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"malformed metrics {where}: {key}={v!r} is not a finite number")
    return float(v)


class _Metrics:
    def __init__(self, root: Path, params: dict):
        self.root, self.params, self.seeds = Path(root), params, [int(s) for s in params["seeds"]]
        self._cache: dict[str, Any] = {}

    def label(self, rel: str) -> str:
        return f"{self.root.name}/{rel}"

    def json(self, rel: str) -> Any:
        if rel not in self._cache:
            path = self.root / rel
            if not path.is_file():
                raise _Missing(self.label(rel))
            try:
                self._cache[rel] = json.loads(path.read_text())
            except json.JSONDecodeError as e:
                raise ValueError(f"malformed metrics file {path}: {e}") from e
        return self._cache[rel]

    def per_seed(self, folder: str, runs: Sequence[str], key: str, configured: Sequence[str]) -> dict[str, list[float]]:
        """``{run: [value of key per seed]}`` from ``<folder>/<run>-<seed>.json``; every missing
        file (or unconfigured run) is named in one ``_Missing``."""
        out, missing = {}, []
        for run in runs:
            if run not in configured:
                missing.append(f"run {run} (not configured for {folder})")
                continue
            absent = [s for s in self.seeds if not (self.root / f"{folder}/{run}-{s}.json").is_file()]
            if absent:
                missing.append(self.label(f"{folder}/{run}-<seed>.json") + f" (seeds {', '.join(map(str, absent))})")
                continue
            out[run] = [_number(self.json(f"{folder}/{run}-{s}.json"), key, self.label(f"{folder}/{run}-{s}.json"))
                        for s in self.seeds]
        if missing:
            raise _Missing("; ".join(missing))
        return out

    def image(self, runs: Sequence[str], key: str) -> dict[str, list[float]]:
        return self.per_seed("image/eval", runs, key, self.params["image"]["ladder"])

    def track(self, track: str, runs: Sequence[str], key: str) -> dict[str, list[float]]:
        if track not in self.params:
            raise _Missing(f"params has no {track!r} section")
        return self.per_seed(f"tracks/{track}", runs, key, self.params[track]["runs"])

    def prune_curve(self, run: str, seed: int, order: str = "connectivity") -> list[dict]:
        """The prune rows of one (run, seed, order), sorted by dropped fraction, starting at 0."""
        if run not in self.params.get("prune", {}).get("runs", []):
            raise _Missing(f"run {run} (not in prune.runs)")
        rows = self.json("image/prune.json")
        if not isinstance(rows, list):
            raise ValueError(f"malformed metrics {self.label('image/prune.json')}: expected a list of rows")
        where = self.label("image/prune.json")
        for r in rows:
            for key in ("run", "seed"):
                if not isinstance(r, dict) or key not in r:
                    raise ValueError(f"malformed metrics {where}: a row without {key!r}")
        curve = sorted((r for r in rows if r["run"] == run and r["seed"] == seed
                        and r.get("order", "connectivity") == order),
                       key=lambda r: _number(r, "dropped_fraction", where))
        for r in curve:
            _number(r, "acc1", where)
        if not curve or curve[0]["dropped_fraction"] != 0.0:
            raise _Missing(f"{where}: no dropped_fraction 0 row for {run} seed {seed} ({order} order)")
        return curve

    def mechanism(self, run: str, phase: str) -> list[dict]:
        """The ``mechanism`` block (``nac.mechanism``) of a run's training metrics, per seed."""
        out = []
        for s in self.seeds:
            rel = f"image/train/{run}-{s}.json"
            t = self.json(rel)
            if not isinstance(t, dict) or "mechanism" not in t or phase not in t["mechanism"]:
                raise _Missing(f"mechanism numbers ({phase}) in {self.label(rel)}")
            out.append(t["mechanism"][phase])
        return out


def max_fraction_within(curve: Sequence[dict], max_loss: float = PRUNE_MAX_LOSS) -> dict:
    """Scanning dropped fractions upwards, the last row whose acc1 ≥ full acc1 − max_loss before
    the first that falls below it (the row of fraction 0 if the first drop already fails)."""
    full, best = curve[0]["acc1"], curve[0]
    for r in curve:
        if r["acc1"] < full - max_loss:
            break
        best = r
    return best


# ---------------------------------------------------------------------------- the claims
@dataclass(frozen=True)
class _Claim:
    id: str
    source: str
    claim: str
    paper: str
    measure: str
    evaluate: Callable[[], dict]


def _result(iv: Interval, verdict: tuple[str, str], ours: str, threshold: bool = False) -> dict:
    lo, hi = (iv.lo, iv.hi) if iv.has_ci else ((iv.estimate, iv.estimate) if threshold else (None, None))
    return {"ours": ours, "estimate": iv.estimate, "lo": lo, "hi": hi, "n": iv.n,
            "verdict": verdict[0], "reason": verdict[1]}


def _ci_text(iv: Interval, fmt: Callable[[float], str] = "{:+.2f}".format) -> str:
    return f"{fmt(iv.estimate)} [{fmt(iv.lo)}, {fmt(iv.hi)}]" if iv.has_ci else f"{fmt(iv.estimate)} (no CI)"


def seed_ci(a: Sequence[float], b: Sequence[float]) -> Interval:
    """a − b over seeds: paired by seed when both lists cover the same seeds (in order), else Welch."""
    return paired_ci(a, b) if len(a) == len(b) else welch_ci(a, b)


def _diff(vals: dict[str, list[float]], a: str, b: str, delta: float = DELTA, equivalence: bool = False,
          what: str = "") -> dict:
    """vals[a] − vals[b] over seeds (``seed_ci``), judged by the difference (or equivalence) rule."""
    iv = seed_ci(vals[a], vals[b])
    ours = f"d = {_ci_text(iv)}; {what}{a} {np.mean(vals[a]):.2f} vs {b} {np.mean(vals[b]):.2f}; n = {iv.n} seed(s)"
    return _result(iv, (equivalence_verdict if equivalence else difference_verdict)(iv, delta), ours)


def _paper_table1(run: str, col: int) -> float:
    return TABLE1.get(run, (math.nan,) * 4)[col]


def _claims(params: dict, m: _Metrics) -> list[_Claim]:
    prior = params["prior"]["name"]
    head = f"nac-{prior}"
    ladder = params["image"]["ladder"]
    priors = [f"nac-{pr}" for pr in PRIORS if f"nac-{pr}" in ladder]  # the four prior NACs, not their controls
    IID, OOD = 0, 2
    p = lambda run, col: _paper_table1(run, col)  # noqa: E731

    def priors_similar() -> dict:
        vals = m.image(priors, "iid_acc1")
        if len(priors) < 2:
            raise _Missing("fewer than 2 priors in image.ladder")
        pairs = []
        for a, b in combinations(priors, 2):
            a, b = (a, b) if np.mean(vals[a]) >= np.mean(vals[b]) else (b, a)
            pairs.append((f"{a} − {b}", seed_ci(vals[a], vals[b])))
        name, widest = max(pairs, key=lambda t: abs(t[1].estimate))
        verdict = combine([(n, *equivalence_verdict(iv)) for n, iv in pairs], "pairs")
        return _result(widest, verdict, f"largest absolute difference {name} = {_ci_text(widest)}; n = {widest.n} seed(s)")

    def prune_fraction() -> dict:
        fr = [max_fraction_within(m.prune_curve(head, s))["dropped_fraction"] for s in m.seeds]
        iv = mean_ci(fr)
        f3 = "{:.3f}".format
        ours = f"{_ci_text(iv, f3)}; per seed {', '.join(f'{f:g}' for f in fr)}; n = {iv.n} seed(s)"
        return _result(iv, threshold_verdict(iv, 0.8, fmt=f3), ours, threshold=True)

    def prune_speedup() -> dict:
        curve = m.prune_curve(head, m.seeds[0])
        best, where = max_fraction_within(curve), f"{m.label('image/prune.json')} ({head} seed {m.seeds[0]})"
        if not isinstance(best.get("images_per_s"), list) or not isinstance(curve[0].get("images_per_s"), list):
            raise _Missing(f"repeated timings (images_per_s lists) in {where}")
        full = float(np.mean(curve[0]["images_per_s"]))
        iv = mean_ci([float(v) / full for v in best["images_per_s"]])
        ours = (f"{_ci_text(iv, '{:.2f}×'.format)} at dropped fraction {best['dropped_fraction']:g} "
                f"({curve[0].get('device', '?')}; CI over {iv.n} timed repeats)")
        return _result(iv, threshold_verdict(iv, 8.0, fmt="{:.2f}×".format), ours, threshold=True)

    def prune_vs_pio() -> dict:
        curves = {(run, s): m.prune_curve(run, s) for run in (PIO, head) for s in m.seeds}
        common = set.intersection(*({r["dropped_fraction"] for r in c} for c in curves.values()))
        cand = [f for f in common if 0.0 < f <= PRUNE_COMPARE_AT]
        if not cand:
            raise _Missing(f"a dropped fraction in (0, {PRUNE_COMPARE_AT:g}] common to {PIO} and {head} in prune.json")
        f = max(cand)
        at = lambda c: next(r["acc1"] for r in c if r["dropped_fraction"] == f)  # noqa: E731
        loss = {run: [curves[run, s][0]["acc1"] - at(curves[run, s]) for s in m.seeds] for run in (PIO, head)}
        return _diff(loss, PIO, head, what=f"Acc@1 loss at dropped fraction {f:g}: ")

    nac_runs = priors

    def dist(run: str, target: str, phase: str = "final") -> list[float]:
        where = m.label(f"image/train/{run}-<seed>.json")
        return [_number(x.get("distance") if isinstance(x, dict) else None, target, where) for x in m.mechanism(run, phase)]

    def graph_follows_prior() -> dict:
        if len(nac_runs) < 2:
            raise _Missing("fewer than 2 NAC priors in image.ladder")
        parts, closest, widest = [], 0, None
        for run in nac_runs:
            target = run[4:]
            own = dist(run, target)
            ivs = [(other, paired_ci(dist(other, target), own)) for other in nac_runs if other != run]
            verdicts = [(f"{target}: {o} − {run}", *difference_verdict(iv, delta=0.0)) for o, iv in ivs]
            parts += verdicts
            closest += all(v[1] == SUPPORTED for v in verdicts)
            low = min(ivs, key=lambda t: t[1].estimate)[1]
            widest = low if widest is None or low.estimate < widest.estimate else widest
        verdict = combine(parts, "comparisons")
        ours = (f"own target closest for {closest} of {len(nac_runs)} targets; smallest margin (other − own distance) "
                f"{_ci_text(widest, '{:+.4f}'.format)}; n = {widest.n} seed(s)")
        return _result(widest, verdict, ours)

    def regularizer_sparse() -> dict:
        ctrl = f"{head}-noreg"
        if ctrl not in ladder:
            raise _Missing(f"the control {ctrl} (not in image.ladder)")
        sp = lambda run: [100 * _number(x, "sparsity", m.label(f"image/train/{run}-<seed>.json"))  # noqa: E731
                          for x in m.mechanism(run, "final")]
        iv_sp = paired_ci(sp(head), sp(ctrl))
        iv_d = paired_ci(dist(ctrl, prior), dist(head, prior))
        parts = [("sparsity (points)", *difference_verdict(iv_sp, delta=0.0)),
                 ("distance to the prior", *difference_verdict(iv_d, delta=0.0))]
        ours = (f"links with P = 0: {head} {np.mean(sp(head)):.1f}% vs {ctrl} {np.mean(sp(ctrl)):.1f}%, "
                f"d = {_ci_text(iv_sp)}; distance to {prior}: control − NAC = {_ci_text(iv_d, '{:+.4f}'.format)}; "
                f"n = {iv_sp.n} seed(s)")
        return _result(iv_sp, combine(parts, "measures"), ours)

    def prior_beyond_init() -> dict:
        ctrl = f"{head}-randinit"
        if ctrl not in ladder:
            raise _Missing(f"the control {ctrl} (not in image.ladder)")
        iv = paired_ci(dist(ctrl, prior, "init"), dist(ctrl, prior, "final"))
        gap = paired_ci(dist(ctrl, prior), dist(head, prior))
        ours = (f"{ctrl}: distance to {prior} init − final = {_ci_text(iv, '{:+.4f}'.format)}; at the end it is "
                f"{_ci_text(gap, '{:+.4f}'.format)} farther than {head}; n = {iv.n} seed(s)")
        return _result(iv, difference_verdict(iv, delta=0.0), ours)

    def kernel_matters() -> dict:
        runs = [r for r in (*nac_runs, "frozen_graph") if r in ladder]
        parts, ivs = [], []
        for run in runs:
            acc = m.image([run], "iid_acc1")[run]
            if not all("iid_acc1_dense" in m.json(f"image/eval/{run}-{s}.json") for s in m.seeds):
                raise _Missing(f"iid_acc1_dense (the kernel ablation) in {m.label(f'image/eval/{run}-<seed>.json')}")
            dense = m.image([run], "iid_acc1_dense")[run]
            iv = paired_ci(acc, dense)
            parts.append((run, *difference_verdict(iv)))
            ivs.append((run, iv))
        name, low = min(ivs, key=lambda t: t[1].estimate)
        ours = f"smallest cost of removing the kernel: {name} {_ci_text(low)} points ({len(ivs)} models)"
        return _result(low, combine(parts, "models"), ours)

    def prune_vs_random() -> dict:
        k = int(params.get("prune", {}).get("random_orders", 0))
        if k < 1:
            raise _Missing("random-order control (prune.random_orders: 0)")
        curves = [m.prune_curve(head, s, order) for s in m.seeds for order in ("connectivity", *(f"random-{i}" for i in range(k)))]
        common = set.intersection(*({r["dropped_fraction"] for r in c} for c in curves))
        cand = [f for f in common if 0.0 < f <= PRUNE_CONTROL_AT]
        if not cand:
            raise _Missing(f"a dropped fraction in (0, {PRUNE_CONTROL_AT:g}] common to every seed and order of {head} "
                           "in prune.json")
        f = max(cand)
        at = lambda c: next(r["acc1"] for r in c if r["dropped_fraction"] == f)  # noqa: E731
        a = [at(m.prune_curve(head, s)) for s in m.seeds]
        b = [float(np.mean([at(m.prune_curve(head, s, f"random-{i}")) for i in range(k)])) for s in m.seeds]
        iv = paired_ci(a, b)
        ours = (f"Acc@1 at dropped fraction {f:g}: connectivity {np.mean(a):.2f} vs random orders {np.mean(b):.2f}, "
                f"d = {_ci_text(iv)}; n = {iv.n} seed(s), {k} random orders each")
        return _result(iv, difference_verdict(iv), ours)

    def fewshot(target: str) -> Callable[[], dict]:
        def run() -> dict:
            rel = f"fewshot/{target}.json"
            rows, where = m.json(rel), m.label(rel)
            if not isinstance(rows, dict) or not isinstance(rows.get("rows"), list):
                raise ValueError(f"malformed metrics {where}: expected {{'rows': [...]}}")
            acc: dict[tuple[str, int, int], float] = {}
            for r in rows["rows"]:
                if not isinstance(r, dict) or "run" not in r:
                    raise ValueError(f"malformed metrics {where}: a row without 'run'")
                if r["run"] not in (PIO, NAC) or _number(r, "shots", where) > LOW_SHOTS:
                    continue
                key = (r["run"], int(_number(r, "episode", where)), int(r["shots"]))
                if key in acc:
                    raise ValueError(f"malformed metrics {where}: duplicate row {key}")
                acc[key] = _number(r, "acc1", where)
            keys = {run: {k[1:] for k in acc if k[0] == run} for run in (PIO, NAC)}
            if not keys[PIO] and not keys[NAC]:
                raise _Missing(f"rows with shots ≤ {LOW_SHOTS} in {where}")
            if keys[PIO] != keys[NAC]:
                raise ValueError(f"malformed metrics {where}: {NAC} and {PIO} rows are not paired "
                                 f"(unmatched (episode, shots): {sorted(keys[PIO] ^ keys[NAC])})")
            episodes = sorted({e for e, _ in keys[NAC]})
            diffs = [np.mean([acc[(NAC, e, k)] - acc[(PIO, e, k)] for e_, k in keys[NAC] if e_ == e]) for e in episodes]
            iv = mean_ci(diffs)
            means = {run: np.mean([v for k, v in acc.items() if k[0] == run]) for run in (NAC, PIO)}
            shots = sorted({k for _, k in keys[NAC]})
            ours = (f"d = {_ci_text(iv)}; {NAC} {means[NAC]:.2f} vs {PIO} {means[PIO]:.2f} "
                    f"(shots {', '.join(map(str, shots))}; n = {iv.n} episodes)")
            return _result(iv, difference_verdict(iv), ours)
        return run

    def gap(track: str) -> Callable[[], dict]:
        return lambda: _diff(m.track(track, [NAC, PIO], "test_acc1"), NAC, PIO)

    def above_chance() -> dict:
        parts, ivs = [], []
        for track in ("points", "listops", "text", "nlvr"):
            for run in (params.get(track) or {}).get("runs", []):
                if track == "nlvr" and run in NLVR_CONTROLS:  # controls: chance is their possible, informative outcome
                    continue
                try:
                    acc = m.track(track, [run], "test_acc1")[run]
                    chance = float(np.mean(m.track(track, [run], "test_chance")[run]))
                except _Missing:
                    parts.append((f"{track}/{run}", INCONCLUSIVE, "not measured"))
                    continue
                iv = mean_ci(acc)
                parts.append((f"{track}/{run}", *threshold_verdict(iv, chance, strict=True)))
                ivs.append((f"{track}/{run}", Interval(iv.estimate - chance, None if iv.lo is None else iv.lo - chance,
                                                       None if iv.hi is None else iv.hi - chance, iv.n)))
        if not ivs:
            raise _Missing(f"{m.label('tracks/<track>/<run>-<seed>.json')} for all {len(parts)} track models "
                           f"({', '.join(n for n, _, _ in parts)})" if parts else "no track runs configured")
        name, low = min(ivs, key=lambda t: t[1].estimate)
        verdict = combine(parts, "models")
        ours = f"smallest margin over chance: {name} {_ci_text(low)} ({len(ivs)} of {len(parts)} models measured)"
        return _result(low, verdict, ours, threshold=True)

    def nlvr_controls(key: str) -> tuple[dict[str, list[float]], str]:
        vals = m.track("nlvr", ["conditional", *NLVR_CONTROLS], key)
        return vals, max(NLVR_CONTROLS, key=lambda r: np.mean(vals[r]))

    def nlvr_vs_zeroshot() -> dict:
        if ZERO_SHOT_RUN not in params.get("nlvr", {}).get("runs", []):
            raise _Missing("no CLIP zero-shot row in this suite (no CLIP weights offline); no substitute control is used")
        return _diff(m.track("nlvr", ["conditional", ZERO_SHOT_RUN], "val_acc1"), "conditional", ZERO_SHOT_RUN)

    def nlvr_uses_both() -> dict:
        vals, best = nlvr_controls("test_acc1")
        parts = [(c, *difference_verdict(seed_ci(vals["conditional"], vals[c]))) for c in NLVR_CONTROLS]
        out = _diff(vals, "conditional", best)
        out["verdict"], out["reason"] = combine(parts, "controls")
        return out

    def nlvr_analysis() -> tuple[dict, str]:
        a, where = m.json("nlvr/analysis.json"), m.label("nlvr/analysis.json")
        if not isinstance(a, dict):
            raise ValueError(f"malformed metrics {where}: expected an object")
        return a, where

    def nlvr_type_structure() -> dict:
        a, where = nlvr_analysis()
        u = a.get("untrained")
        if not isinstance(u, dict) or "knn_accuracy" not in u or "knn_accuracy" not in a:
            raise _Missing(f"kNN accuracy of the trained and the untrained-generator control in {where}")
        iv = knn_gap(_number(a, "knn_accuracy", where), _number(a, "knn_accuracy_ci95", where),
                     _number(u, "knn_accuracy", where), _number(u, "knn_accuracy_ci95", where),
                     int(_number(a, "folds", where)))
        sil, sil_u = _number(a, "silhouette", where), _number(u, "silhouette", where)
        parts = [("kNN excess over the untrained generator", *difference_verdict(iv)),
                 ("silhouette", *((SUPPORTED, f"{sil:.3f} > untrained {sil_u:.3f}") if sil > sil_u
                                  else (NOT_SUPPORTED, f"{sil:.3f} ≤ untrained {sil_u:.3f}")))]
        ours = (f"d = {_ci_text(iv)}; kNN trained {a['knn_accuracy']:.2f} vs untrained {u['knn_accuracy']:.2f} "
                f"(shuffled types {a.get('knn_shuffled', float('nan')):.2f}); silhouette trained {sil:.3f} vs untrained {sil_u:.3f}")
        return _result(iv, combine(parts, "measures"), ours)

    def nlvr_diversity() -> dict:
        a, where = nlvr_analysis()
        complete = _number(a, "cut_complete_fraction", where) if "cut_complete_fraction" in a else None
        distinct = _number(a, "cut_distinct_fraction", where) if "cut_distinct_fraction" in a else None
        if complete is None or distinct is None:
            raise _Missing(f"cut_complete_fraction / cut_distinct_fraction in {where}")
        parts = [("not complete at the 0.5 cut", *((SUPPORTED, f"{100 * complete:.1f}% of graphs complete")
                                                   if complete < 0.5 else (NOT_SUPPORTED, f"{100 * complete:.1f}% of graphs complete"))),
                 ("differ between sentences", *((SUPPORTED, f"{100 * distinct:.1f}% differ from the most common graph")
                                                if distinct >= SPREAD_MIN else
                                                (NOT_SUPPORTED, f"{100 * distinct:.1f}% differ from the most common graph")))]
        iv = Interval(distinct, None, None, 1)
        ours = (f"at P > 0.5: density {100 * _number(a, 'cut_density', where):.1f}%, {100 * complete:.1f}% of graphs complete, "
                f"{100 * distinct:.1f}% differ from the most common graph (n = {int(a.get('n', 0))} sentences, one model)")
        return _result(iv, combine(parts, "criteria"), ours, threshold=True)

    def baseline_eval(run: str, key: str) -> list[Any]:
        if run not in ladder:
            raise _Missing(f"run {run} (not in image.ladder)")
        out = []
        for s in m.seeds:
            rel = f"image/eval/{run}-{s}.json"
            e = m.json(rel)
            if not isinstance(e, dict) or key not in e:
                raise _Missing(f"{key} in {m.label(rel)}")
            out.append(e[key])
        return out

    def ni_matches_pio() -> dict:
        ni = "neural_interpreter"
        vals = m.image([ni, PIO], "iid_acc1")
        params_of = {r: [_number(m.json(f"image/train/{r}-{s}.json"), "parameters", m.label(f"image/train/{r}-{s}.json"))
                         for s in m.seeds] for r in (ni, PIO)}
        iv = seed_ci(vals[ni], vals[PIO])
        out = _result(iv, noninferiority_verdict(iv), f"d = {_ci_text(iv)}; {ni} {np.mean(vals[ni]):.2f} vs {PIO} "
                      f"{np.mean(vals[PIO]):.2f}; n = {iv.n} seed(s)")
        fewer = params_of[ni][0] < params_of[PIO][0]
        parts = [("IID Acc@1 not worse by more than δ", out["verdict"], out["reason"]),
                 ("fewer parameters", SUPPORTED if fewer else NOT_SUPPORTED,
                  f"{int(params_of[ni][0]):,} vs {int(params_of[PIO][0]):,}")]
        out["verdict"], out["reason"] = combine(parts, "criteria")
        out["ours"] += f"; parameters {int(params_of[ni][0]):,} vs {int(params_of[PIO][0]):,}"
        return out

    def ni_fewshot() -> dict:
        raise _Missing("no few-shot rows for the Neural Interpreter in this suite yet (Figure 4 runs NAC and Perceiver IO)")

    def mn_specialise() -> dict:
        usage = baseline_eval("modular_network", "modular_usage")
        gaps = [float(np.mean(np.asarray(u["mi"]) - np.asarray(u["mi_shuffled"]))) for u in usage]
        iv = mean_ci(gaps)
        ours = (f"I(module; class) − shuffled-label control, mean over layers: {_ci_text(iv, '{:+.4f}'.format)} nats; "
                f"per layer (seed {m.seeds[0]}): {', '.join(f'{a:.3f} vs {b:.3f}' for a, b in zip(usage[0]['mi'], usage[0]['mi_shuffled']))}")
        return _result(iv, difference_verdict(iv, delta=0.0), ours)

    def mn_no_collapse() -> dict:
        usage = baseline_eval("modular_network", "modular_usage")
        low = [float(min(u["exp_entropy"])) for u in usage]
        iv = mean_ci(low)
        ours = (f"smallest per-layer exp(selection entropy) {_ci_text(iv, '{:.2f}'.format)} "
                f"(seed {m.seeds[0]}: {', '.join(f'{v:.2f}' for v in usage[0]['exp_entropy'])})")
        return _result(iv, threshold_verdict(iv, MN_COLLAPSE, fmt="{:.2f}".format), ours, threshold=True)

    def not_measured() -> dict:
        raise _Missing("the suite has no clique analysis of the generated graphs")

    welch, d1 = "paired-by-seed 95% CI", f"δ = {DELTA:g}"
    paired = welch
    ood_best = max(p(r, OOD) for r in TABLE1 if r.startswith("nac-")) - p(PIO, OOD)
    claims = [
        _Claim("ood_gain", "abstract, §4.1 (Table 1)", "NACs are more robust out of distribution than Perceiver IO",
               f"~+2.5 (abstract); Table 1 OOD Acc@1: {head} {p(head, OOD):.2f} vs PIO {p(PIO, OOD):.2f} = "
               f"{p(head, OOD) - p(PIO, OOD):+.2f} (best prior {ood_best:+.2f})",
               f"d = OOD Acc@1 {head} − {PIO}; {welch}; {d1}", lambda: _diff(m.image([head, PIO], "ood_acc1"), head, PIO)),
        _Claim("iid_gain", "§4.1 (Table 1)", "NACs are better in distribution than Perceiver IO",
               f"Table 1 IID Acc@1: {p(head, IID):.2f} vs {p(PIO, IID):.2f} = {p(head, IID) - p(PIO, IID):+.2f}",
               f"d = IID Acc@1 {head} − {PIO}; {welch}; {d1}", lambda: _diff(m.image([head, PIO], "iid_acc1"), head, PIO)),
        _Claim("modfc_alone", "§4.1 (Table 1)", "Adding ModFC alone does not significantly change IID accuracy",
               f"Table 1 IID Acc@1: {p('modfc', IID):.2f} vs {p(PIO, IID):.2f} = {p('modfc', IID) - p(PIO, IID):+.2f}",
               f"d = IID Acc@1 modfc − {PIO}; {welch}; equivalence, {d1}",
               lambda: _diff(m.image(["modfc", PIO], "iid_acc1"), "modfc", PIO, equivalence=True)),
        _Claim("learned_graph", "§4.1 (Table 1)", "Learning the graph beats a frozen sparse graph",
               f"Table 1 IID Acc@1: {head} {p(head, IID):.2f} vs frozen {p('frozen_graph', IID):.2f} = "
               f"{p(head, IID) - p('frozen_graph', IID):+.2f}",
               f"d = IID Acc@1 {head} − frozen_graph; {welch}; {d1}",
               lambda: _diff(m.image([head, "frozen_graph"], "iid_acc1"), head, "frozen_graph")),
        _Claim("priors_similar", "§4.1 (Table 1)", "The graph priors perform similarly in distribution",
               "Table 1 IID Acc@1 60.33–60.76 (largest difference 0.43)",
               f"every pair of {', '.join(priors)}: d = IID Acc@1 difference; {welch}; equivalence, {d1}", priors_similar),
        _Claim("prior_tradeoff_ood", "§4.1 (Table 1)", "Ring-of-cliques is the most robust prior OOD (beats scale-free)",
               f"Table 1 OOD Acc@1: 20.03 vs 19.52 = {p('nac-ring_of_cliques', OOD) - p('nac-scale_free', OOD):+.2f}",
               f"d = OOD Acc@1 nac-ring_of_cliques − nac-scale_free; {welch}; δ = 0.5",
               lambda: _diff(m.image(["nac-ring_of_cliques", "nac-scale_free"], "ood_acc1"), "nac-ring_of_cliques",
                             "nac-scale_free", delta=0.5)),
        _Claim("graph_follows_prior", "§2, §4.1 (Fig. 3)", "Each learned graph follows its own prior",
               "Figure 3 (learned graphs resemble their priors; no number)",
               "for each target T and each other NAC X: d = distance(P_X, T) − distance(P_NAC-T, T) at the end of "
               "training (the regularizer's distance: MSE after the closest permutation); paired-by-seed CI; supported "
               "when the NAC trained towards T is the closest for every target", graph_follows_prior),
        _Claim("regularizer_sparse", "§2, App. A", "The regularizer keeps the graph sparse and near its prior",
               "App. A: without the regularizer signatures collapse to an all-to-all graph",
               f"against the regularizer-off control {head}-noreg (same seeds, same initial signatures): d = % links "
               f"with P = 0 ({head} − control) and d = distance to the {prior} target (control − {head}); "
               "paired-by-seed CIs; both must be > 0", regularizer_sparse),
        _Claim("prior_beyond_init", "§2", "The prior acts beyond initialisation",
               "implied (the prior is a training-time regularizer)",
               f"the random-signature control {head}-randinit (regularizer on): d = distance to the {prior} target at "
               "initialisation − at the end; paired-by-seed CI; supported if > 0 (the regularizer moves a randomly "
               "initialised graph towards its prior)", prior_beyond_init),
        _Claim("kernel_matters", "§2 (eq. 2-3)", "The kernel matters at evaluation",
               "implied (the kernel is the mechanism of every NAC result)",
               f"per NAC prior and the frozen graph: d = IID Acc@1 with the kernel − with dense attention at evaluation "
               f"(same weights); paired-by-seed CI; {d1}; all models", kernel_matters),
        _Claim("prune_fraction", "abstract, §4.1 (Fig. 5a)",
               "More than 80% of the modules can be dropped at < 3 points loss", "> 0.8 of modules dropped",
               f"per seed, the largest dropped fraction of {head} (scanning upwards, stopping at the first failure) "
               f"with Acc@1 ≥ full − {PRUNE_MAX_LOSS:g}; t CI over seeds; threshold 0.8", prune_fraction),
        _Claim("prune_speedup", "abstract, §4.1 (Fig. 5b)", "~8x inference speed-up at < 3 points loss",
               "~8×", f"images/s of {head} (first seed) at the fraction of prune_fraction ÷ at fraction 0; threshold 8 "
               "(single measurement)", prune_speedup),
        _Claim("prune_vs_pio", "§4.1 (Fig. 5a, 15)", "NACs degrade more gracefully than Perceiver IO when dropping modules",
               "no number (NAC stays above PIO beyond 80% dropped)",
               f"d = Acc@1 loss of {PIO} − loss of {head} at dropped fraction {PRUNE_COMPARE_AT:g} (or the largest ≤ it "
               f"measured); {welch}; {d1}", prune_vs_pio),
        _Claim("prune_vs_random", "§4.1 (Fig. 5a)", "Connectivity ranking beats random ranking when dropping modules",
               "implied (modules are dropped least connected first)",
               f"d = Acc@1 of {head} at dropped fraction {PRUNE_CONTROL_AT:g} (or the largest ≤ it), least connected "
               f"first − mean over random orders; paired-by-seed CI; {d1}", prune_vs_random),
        *[_Claim(f"fewshot_{t}", "abstract, §4.1 (Fig. 4)",
                 f"NACs adapt better than Perceiver IO in the low-shot regime ({FEWSHOT_TARGETS.get(t, t)})",
                 f"~+10 (abstract; 1–{LOW_SHOTS} shots per class, 8-way)",
                 f"d = Acc@1 {NAC} − {PIO} on {t}, averaged over shots ≤ {LOW_SHOTS} per episode; paired t CI over "
                 f"episodes; {d1}", fewshot(t))
          for t in params.get("fewshot", {}).get("targets", [])],
        _Claim("points_gap", "§4.2 (Table 2)", "NACs beat Perceiver IO on point-cloud classification",
               "+5.6 (Table 2: 83.0 vs 77.4)", f"d = test Acc@1 {NAC} − {PIO} (points track); {welch}; {d1}",
               gap("points")),
        _Claim("listops_gap", "§4.3 (Table 3)", "NACs beat Perceiver IO on ListOps", "+1.70 (Table 3: 41.40 vs 39.70)",
               f"d = test Acc@1 {NAC} − {PIO} (listops track); {welch}; {d1}", gap("listops")),
        _Claim("text_gap", "§4.3 (Table 3)", "NACs beat Perceiver IO on byte-level text classification",
               "+1.68 (Table 3: 68.18 vs 66.50)", f"d = test Acc@1 {NAC} − {PIO} (text track); {welch}; {d1}",
               gap("text")),
        _Claim("above_chance", "suite (§4.2–4.4)",
               "Every trained model of the tracks is above chance (the NLVR single-modality controls excluded)",
               "implied (all reported accuracies are far above chance)",
               "per track model: test Acc@1 vs test_chance; t CI over seeds; above-chance rule, all models", above_chance),
        _Claim("nlvr_vs_zeroshot", "abstract, §4.4", "The conditional NAC improves on CLIP zero-shot on NLVR2",
               "~64 vs 53 (CLIP zero-shot) = +11, NLVR2 validation",
               (f"d = val Acc@1 conditional − {ZERO_SHOT_RUN}" if ZERO_SHOT_RUN in params.get("nlvr", {}).get("runs", [])
                else "not measured: this suite has no CLIP zero-shot row, and no other control stands in for it")
               + f"; {paired}; {d1}", nlvr_vs_zeroshot),
        _Claim("nlvr_uses_both", "§4.4 (suite check)", "The conditional NAC beats each single-modality control",
               "no number", f"d = test Acc@1 conditional − text_only and − image_only (shown: the better control); "
               f"{welch}; {d1}; all controls", nlvr_uses_both),
        _Claim("nlvr_type_structure", "§4.4 (Fig. 6)", "Different sentence (reasoning) types get different graphs",
               "no number (types cluster in the t-SNE of P)",
               f"d = kNN accuracy of the type from PCA(P) − the same for a freshly initialised model of the same config "
               f"(the untrained-generator control: structure inherited from the sentence alone); CI over CV folds, "
               f"half-widths combined in quadrature; {d1}; and the silhouette of the types above the control's",
               nlvr_type_structure),
        _Claim("nlvr_diversity", "§4.4 (Fig. 6)", "The generated graphs are diverse: sparse and different per sentence",
               "no number (Figure 6 draws graphs at the 0.5 cut)",
               f"at the 0.5 cut: fewer than half of the sentence graphs complete, and at least {100 * SPREAD_MIN:.0f}% of "
               "sentences with a graph other than the most common one (single measurement, both criteria)", nlvr_diversity),
        _Claim("nlvr_two_cliques", "§4.4 (Fig. 6)", "The generated graphs share a structure of two large cliques",
               "no number", "not measured by this suite", not_measured),
        _Claim("ni_matches_pio", "Neural Interpreters (Rahaman et al. 2021)",
               "Neural Interpreters match a non-modular baseline in distribution with fewer parameters",
               "their paper: on par with ViT-style baselines with fewer parameters",
               f"d = IID Acc@1 neural_interpreter − {PIO}; paired-by-seed CI; non-inferiority (lower bound > −δ), {d1}; "
               "and fewer parameters",
               ni_matches_pio),
        _Claim("ni_fewshot", "Neural Interpreters (Rahaman et al. 2021)",
               "Neural Interpreters adapt with fewer samples than a non-modular baseline", "their paper: few-shot curves",
               "few-shot Acc@1 neural_interpreter − perceiver_io at ≤ 4 shots (their fine-tuning protocol)", ni_fewshot),
        _Claim("mn_specialise", "Modular Networks (Kirsch et al. 2018)", "Modules specialise (module choice carries class information)",
               "their paper: modules specialise on input types", "per seed, mean over layers of I(controller's module; "
               "class) − the same with shuffled labels, on validation data; t CI over seeds; > 0", mn_specialise),
        _Claim("mn_no_collapse", "Modular Networks (Kirsch et al. 2018)", "Modules do not collapse without regularisation",
               "their paper: EM avoids module collapse", f"per seed, the smallest per-layer exp(entropy of the "
               f"controller's module choices over validation data); t CI over seeds; threshold {MN_COLLAPSE:g} (1 = collapse)",
               mn_no_collapse),
    ]
    return claims


def knn_gap(acc: float, acc_half: float, base: float, base_half: float, folds: int) -> Interval:
    """kNN accuracy minus a baseline's, with the two CV half-widths combined in quadrature (no CI
    below 2 folds)."""
    d, half = acc - base, math.hypot(acc_half, base_half)
    return Interval(d, d - half, d + half, folds) if folds >= 2 else Interval(d, None, None, folds)


def claim_ids(params: dict) -> tuple[str, ...]:
    """Every claim id for ``params``, in report order (``CLAIM_IDS`` plus ``fewshot_<target>``)."""
    i = CLAIM_IDS.index("prune_vs_random") + 1
    targets = tuple(f"fewshot_{t}" for t in params.get("fewshot", {}).get("targets", []))
    return CLAIM_IDS[:i] + targets + CLAIM_IDS[i:]


def evaluate_claims(params: dict, metrics: Path | str = Path("metrics")) -> list[dict]:
    """One dict (keys ``FIELDS``) per claim of ``claim_ids(params)``, in that order."""
    rows = []
    for c in _claims(params, _Metrics(Path(metrics), params)):
        try:
            res = c.evaluate()
        except _Missing as e:
            res = {"ours": "—", "estimate": None, "lo": None, "hi": None, "n": 0, "verdict": INCONCLUSIVE,
                   "reason": f"not measured: {e}"}
        rows.append({"id": c.id, "source": c.source, "claim": c.claim, "paper": c.paper, "measure": c.measure, **res})
    assert tuple(r["id"] for r in rows) == claim_ids(params), "claim list and claim_ids disagree"
    return rows


def write_claims(params: dict, metrics: Path | str = Path("metrics"), out: Path | str = Path("reports")) -> Path:
    """Write ``out/claims.md`` (profile, rule, one table row per claim) and ``out/tables/claims.csv``."""
    out = Path(out)
    rows = evaluate_claims(params, metrics)
    (out / "tables").mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows, columns=list(FIELDS)).to_csv(out / "tables" / "claims.csv", index=False)
    esc = lambda s: str(s).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    table = pd.DataFrame([{"id": r["id"], "source": r["source"], "claim": esc(r["claim"]), "paper": esc(r["paper"]),
                           "our measurement (95% CI)": esc(r["ours"]), "verdict": f"**{r['verdict']}**",
                           "reason": esc(r["reason"])} for r in rows])
    counts = pd.Series([r["verdict"] for r in rows]).value_counts()
    profile = params.get("profile", "?")
    scale = ("the paper's datasets and model sizes as configured" if profile == "paper" else
             "the embedded stand-in datasets and small models, so a verdict says whether the claim holds for this "
             "suite's scaled-down setting, not whether the paper's number is reproduced")
    lines = ["# The paper's claims, checked", "",
             f"Profile **{profile}**, seeds {list(params['seeds'])}, headline NAC `nac-{params['prior']['name']}`. "
             f"Verdicts are at this profile's scale: {scale}.", "",
             f"Summary: {', '.join(f'{counts.get(v, 0)} {v}' for v in (SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE))} "
             f"of {len(rows)} claims.", "", RULE, "## Claims", "", table.to_markdown(index=False), ""]
    md = out / "claims.md"
    md.write_text("\n".join(lines))
    return md


__all__ = ["CLAIM_IDS", "FIELDS", "RULE", "Interval", "claim_ids", "evaluate_claims", "write_claims", "mean_ci",
           "welch_ci", "paired_ci", "difference_verdict", "equivalence_verdict", "threshold_verdict", "combine",
           "max_fraction_within", "SUPPORTED", "NOT_SUPPORTED", "INCONCLUSIVE"]
