"""The few-shot claim (abstract, Figure 4): one claim per ``fewshot.targets`` entry, NAC vs
Perceiver IO in the low-shot regime, paired over episodes."""

from __future__ import annotations

import numpy as np

from nac.report.claims.deltas import accuracy_delta, delta_line
from nac.report.claims.metrics import NAC, PIO, Missing, number
from nac.report.claims.registry import Context, claim
from nac.report.claims.rules import _ci_text, _result, difference_verdict
from nac.report.published import FEWSHOT_CLAIM
from nac.stats import mean_ci

LOW_SHOTS = 4  # the "low-shot regime": 1-4 shots per class
FEWSHOT_TARGETS = {
    "digits": "digits (stand-in for CIFAR)",
    "shapes_novel": "novel shapes (stand-in for CUB)",
    "objects_novel": "novel objects (stand-in for CUB)",
    "cifar10": "CIFAR-10",
    "cub": "CUB-200-2011",
}


def _targets(params: dict) -> list[str]:
    return list(params.get("fewshot", {}).get("targets", []))


def lowshot_pairs(c: Context, target: str, a: str, b: str) -> tuple[list[float], dict[str, float], list[int]]:
    """Runs ``a`` and ``b`` on one target in the low-shot regime, paired by episode: the per-episode
    mean over shots <= ``LOW_SHOTS`` of acc1(a) - acc1(b), each run's mean, and the shot counts."""
    rel = f"fewshot/{target}.json"
    rows, where = c.m.json(rel), c.m.label(rel)
    if not isinstance(rows, dict) or not isinstance(rows.get("rows"), list):
        raise ValueError(f"malformed metrics {where}: expected {{'rows': [...]}}")
    acc: dict[tuple[str, int, int], float] = {}
    for r in rows["rows"]:
        if not isinstance(r, dict) or "run" not in r:
            raise ValueError(f"malformed metrics {where}: a row without 'run'")
        if r["run"] not in (a, b) or number(r, "shots", where) > LOW_SHOTS:
            continue
        if rows.get("source") == "image" and "model_index" in r:  # the episode's model: a ladder run's seed
            seed = c.m.all_seeds[int(number(r, "model_index", where)) % len(c.m.all_seeds)]
            if seed not in c.m.seeds:  # left out by the run gate's sensitivity (both runs: same episodes)
                continue
            c.m.touch("image", r["run"], seed)
        key = (r["run"], int(number(r, "episode", where)), int(r["shots"]))
        if key in acc:
            raise ValueError(f"malformed metrics {where}: duplicate row {key}")
        acc[key] = number(r, "acc1", where)
    keys = {run: {k[1:] for k in acc if k[0] == run} for run in (a, b)}
    if not keys[a] or not keys[b]:
        absent = [run for run in (a, b) if not keys[run]]
        raise Missing(f"rows of {' and '.join(absent)} with shots ≤ {LOW_SHOTS} in {where}")
    if keys[a] != keys[b]:
        raise ValueError(
            f"malformed metrics {where}: {a} and {b} rows are not paired "
            f"(unmatched (episode, shots): {sorted(keys[a] ^ keys[b])})"
        )
    episodes = sorted({e for e, _ in keys[a]})
    diffs = [float(np.mean([acc[(a, e, k)] - acc[(b, e, k)] for e_, k in keys[a] if e_ == e])) for e in episodes]
    means = {run: float(np.mean([v for k, v in acc.items() if k[0] == run])) for run in (a, b)}
    return diffs, means, sorted({k for _, k in keys[a]})


@claim(
    "fewshot",
    per=_targets,
    source="abstract, §4.1 (Fig. 4)",
    statement=lambda c, t: f"NACs adapt better than Perceiver IO in the low-shot regime ({FEWSHOT_TARGETS.get(t, t)})",
    paper=f"~+10 (abstract; 1–{LOW_SHOTS} shots per class, 8-way)",
    measure=lambda c, t: (
        f"d = Acc@1 {NAC} − {PIO} on {t}, averaged over shots ≤ {LOW_SHOTS} per episode; paired t "
        f"CI over episodes; δ = {accuracy_delta(c.params, 'fewshot'):g}"
    ),
    delta=lambda c, t: delta_line(c.params, "fewshot", why="a practical threshold below the paper's ~+10"),
    effect=lambda c, t: FEWSHOT_CLAIM,
)
def fewshot(c: Context, target: str) -> dict:
    diffs, means, shots = lowshot_pairs(c, target, NAC, PIO)
    iv = mean_ci(diffs)
    ours = (
        f"d = {_ci_text(iv)}; {NAC} {means[NAC]:.2f} vs {PIO} {means[PIO]:.2f} "
        f"(shots {', '.join(map(str, shots))}; n = {iv.n} episodes)"
    )
    return _result(iv, difference_verdict(iv, accuracy_delta(c.params, "fewshot")), ours)
