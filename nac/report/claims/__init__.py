"""The paper's claims (abstract, sections 4.1-4.4), each checked against our metrics by one
stated verdict rule (``RULE``, written at the top of ``reports/claims.md``).

Layout: ``rules`` (the verdict rule and its pieces), ``metrics`` (reading metrics/), ``registry``
(``@claim``, the ordered registry, ``evaluate_claims``) and one topic module per group of claims
(``image``, ``mechanism``, ``prune``, ``fewshot``, ``tracks``, ``nlvr``, ``baselines``), where each
claim is one function registered by name.

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
claim the verdict "not measured" with the reason "not measured: <what is missing>"; a malformed one
(bad JSON, a missing key, a non-numeric value, unpaired few-shot episodes) raises ``ValueError``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

# the topic modules register their claims on import (the report order is registry.TOPICS, not this order)
from nac.report.claims import baselines, fewshot, gate, image, mechanism, nlvr, prune, tracks  # noqa: F401
from nac.report.claims.baselines import MN_COLLAPSE
from nac.report.claims.fewshot import FEWSHOT_TARGETS, LOW_SHOTS
from nac.report.claims.metrics import NAC, NLVR_CONTROLS, PIO
from nac.report.claims.nlvr import SPREAD_MIN, ZERO_SHOT_RUN, knn_gap
from nac.report.claims.power import power_text
from nac.report.claims.prune import PRUNE_COMPARE_AT, PRUNE_CONTROL_AT, PRUNE_MAX_LOSS, max_fraction_within
from nac.report.claims.registry import FIELDS, JSON_FIELDS, Claim, claim, claim_ids, evaluate_claims, registered
from nac.report.claims.rules import (
    DELTA,
    NOT_MEASURED,
    NOT_SUPPORTED,
    RULE,
    SUPPORTED,
    UNDECIDED,
    VERDICTS,
    combine,
    difference_verdict,
    equivalence_verdict,
    noninferiority_verdict,
    seed_ci,
    threshold_verdict,
)
from nac.stats import Interval, mean_ci, paired_ci, welch_ci

CLAIM_IDS: tuple[str, ...] = tuple(c.name for c in registered() if c.per is None)


def write_claims(
    params: dict,
    metrics: Path | str = Path("metrics"),
    out: Path | str = Path("reports"),
    rows: list[dict] | None = None,
    gated: tuple[list, list[str]] | None = None,
) -> Path:
    """Write ``out/claims.md`` (profile, rule, one section per claim headed by its id: the verdict, the
    claim, the paper's number, the measure, ours and why)
    and ``out/tables/claims.csv``; ``rows``: ``evaluate_claims``'s, when the caller has them; ``gated``:
    the run gate's ``(flags, unjudged)`` those rows were judged with (``gate.judge``; judged here once
    when None, and handed to ``evaluate_claims`` where the rows are made here)."""
    out = Path(out)
    gated = gate.judge(gate.training_records(metrics, params)) if gated is None else gated
    rows = evaluate_claims(params, metrics, flags=gated[0]) if rows is None else rows
    (out / "tables").mkdir(parents=True, exist_ok=True)
    csv_frame(rows).to_csv(out / "tables" / "claims.csv", index=False)
    sections = []
    for r in rows:  # one short section per claim (anchor: its id), each field on its own line
        sections += [
            f"### {r['id']}",
            "",
            f"**{r['verdict']}**: {r['claim']} ({r['source']}).",
            "",
            f"- *Paper*: {r['paper']}",
            f"- *Measure*: {r['measure']}",
            f"- *δ*: {r.get('delta') or '—'}",
            f"- *Ours*: {r['ours']}",
            f"- *Deciding test*: {test_text(r.get('deciding'))}",
            f"- *Power*: {power_text(r.get('power') or {}) or '—'}",
            f"- *Why*: {r['reason']}",
            *other_tests(r),
            *sensitivity_lines(r),
            "",
        ]
    counts = pd.Series([r["verdict"] for r in rows]).value_counts()
    profile = params.get("profile", "?")
    scale = (
        "the paper's datasets and model sizes as configured"
        if profile == "paper"
        else "the embedded stand-in datasets and small models, so a verdict says whether the claim holds for this "
        "suite's scaled-down setting, not whether the paper's number is reproduced"
    )
    lines = [
        "# The paper's claims, checked",
        "",
        f"Profile **{profile}**, seeds {list(params['seeds'])}, headline NAC `nac-{params['prior']['name']}`. "
        f"Verdicts are at this profile's scale: {scale}.",
        "",
        f"Summary: {', '.join(f'{counts.get(v, 0)} {v}' for v in VERDICTS)} of {len(rows)} claims.",
        "",
        RULE,
        *gate_section(*gated),
        "## Claims",
        "",
        *sections,
    ]
    md = out / "claims.md"
    md.write_text("\n".join(lines), encoding="utf-8")
    return md


# The claims `dvc exp show` / `dvc metrics diff` show (metrics/summary.json), beside the verdict counts.
HEADLINE_CLAIMS = (
    "iid_gain",
    "ood_gain",
    "learned_graph",
    "regularizer_sparse",
    "prune_fraction",
    "points_gap",
    "listops_gap",
)


def _number(v, integer: bool = False):
    """4 significant digits (read, not recomputed); None where there is no finite number (JSON has no inf)."""
    if v is None or v != v or v in (float("inf"), float("-inf")):
        return None
    return int(v) if integer else float(f"{v:.4g}")


def verdict_counts(rows: list[dict]) -> dict[str, int]:
    """How many claims have each verdict (``VERDICTS``, spaces as underscores: DVC column names)."""
    got = pd.Series([r["verdict"] for r in rows]).value_counts()
    return {v.replace(" ", "_"): int(got.get(v, 0)) for v in VERDICTS}


def headline(rows: list[dict]) -> dict:
    """``metrics/summary.json``, the file `dvc exp show` compares: the verdict counts and, for the
    ``HEADLINE_CLAIMS``, their estimate with its 95% CI and n (None where not measured)."""
    out: dict = verdict_counts(rows)  # top level: short DVC column names (`dvc exp show` at 80 columns)
    by_id = {r["id"]: r for r in rows}
    for cid in HEADLINE_CLAIMS:
        if cid in by_id:
            r = by_id[cid]
            out[cid] = {k: _number(r[k], k == "n") for k in ("estimate", "lo", "hi", "n")}
    return out


def claims_metrics(rows: list[dict]) -> dict:
    """``metrics/claims.json``, the file `dvc metrics show` lists in full: every claim's estimate,
    95% CI (lo, hi), n and verdict, by claim id in report order (numbers None where not measured); its
    deciding test's interval, and the power of that test: the effect it detects at 80% at this n
    (``detectable``) and the units at which the effect of interest would be decided (``needed``)."""
    out = {}
    for r in rows:
        d, pw = r.get("deciding") or {}, r.get("power") or {}
        out[r["id"]] = {
            **{k: _number(r[k], k == "n") for k in ("estimate", "lo", "hi", "n")},
            "verdict": r["verdict"],
            "deciding": {k: _number(d.get(k), k == "n") for k in ("estimate", "lo", "hi", "n")}
            | {"test": d.get("name") or ""},
            "detectable": _number(pw.get("detectable")),
            "needed": _number(pw.get("needed"), True),
            "effect": _number(pw.get("effect")),
            "sensitivity": None
            if not r.get("sensitivity")
            else {k: _number(r["sensitivity"].get(k), k == "n") for k in ("estimate", "lo", "hi", "n")}
            | {"verdict": r["sensitivity"]["verdict"], "without": r["sensitivity"]["without"]},
        }
    return out


def _fmt(v) -> str:
    return "—" if v is None else f"{v:+.3g}"


def test_text(t: dict | None) -> str:
    """``name: d = +3.7 [-5.3, +12.7], n = 5 (difference, δ = 2.24): undecided``."""
    if not t:
        return "—"
    ci = f" [{_fmt(t['lo'])}, {_fmt(t['hi'])}]" if t.get("lo") is not None else ""
    target = {"difference": "δ", "equivalence": "±δ", "noninferiority": "−δ", "threshold": "x", "above": "chance"}
    rule = f" ({t['kind']}, {target.get(t['kind'], '')} = {t['target']:g})" if t.get("kind") else ""
    est = f"d = {_fmt(t['estimate'])}{ci}, n = {t['n']}" if t.get("estimate") is not None else t.get("reason", "")
    return f"{(t.get('name') or 'the test') + ': '}{est}{rule}: {t['verdict']}"


def other_tests(r: dict) -> list[str]:
    """The claim's other tests (a claim of several), one line each, for claims.md."""
    parts = r.get("parts") or []
    if len(parts) < 2:
        return []
    deciding = (r.get("deciding") or {}).get("name")
    return ["- *Every test*:"] + [
        f"  - {test_text(t)}" + (" (decided)" if t.get("name") == deciding else "") for t in parts
    ]


def sensitivity_text(s: dict | None) -> str:
    """``without image perceiver_io seed 1: +0.3 [-0.2, +0.8], n = 4: undecided``, or ""."""
    if not s:
        return ""
    ci = f" [{_fmt(s['lo'])}, {_fmt(s['hi'])}]" if s.get("lo") is not None else ""
    est = f"{_fmt(s['estimate'])}{ci}, n = {s['n']}" if s.get("estimate") is not None else f"n = {s.get('n')}"
    return f"without {', '.join(s['without'])}: {est}: {s['verdict']}"


def sensitivity_lines(r: dict) -> list[str]:
    """The run gate's sensitivity of a claim that read a flagged run, for claims.md."""
    s = r.get("sensitivity")
    return [f"- *Without the runs that did not train* (the run gate): {sensitivity_text(s)}"] if s else []


def gate_section(flags: list, unjudged: list[str]) -> list[str]:
    """claims.md's section on the run gate (``gate``, docs/run-gate.md): every flagged run, its reasons
    and numbers, and the models it could not judge (``gate.judge``'s answer)."""
    head = [
        "## Runs that did not train (the run gate)",
        "",
        "Each run's training record is judged against its peers (the same model at the other seeds) and "
        "against reaching their level before its learning rate anneals (the rule: `docs/run-gate.md`). "
        "Every run stays in the primary analysis; a claim that reads a flagged run is judged again without "
        "that seed, the line *Without the runs that did not train* in its section.",
        "",
    ]
    body = [f"- {f.text()}" for f in flags] or ["- No run flagged."]
    return head + body + [f"- {u}" for u in unjudged] + [""]


def csv_frame(rows: list[dict]) -> pd.DataFrame:
    """``rows`` as ``tables/claims.csv``'s frame: ``FIELDS``, the dicts and lists as JSON text."""
    return pd.DataFrame(
        [{k: (json.dumps(r.get(k), default=float) if k in JSON_FIELDS else r.get(k)) for k in FIELDS} for r in rows],
        columns=list(FIELDS),
    )


__all__ = [
    "CLAIM_IDS",
    "csv_frame",
    "gate",
    "sensitivity_text",
    "test_text",
    "power_text",
    "FIELDS",
    "HEADLINE_CLAIMS",
    "claims_metrics",
    "verdict_counts",
    "RULE",
    "Interval",
    "claim_ids",
    "evaluate_claims",
    "headline",
    "write_claims",
    "mean_ci",
    "welch_ci",
    "paired_ci",
    "difference_verdict",
    "equivalence_verdict",
    "noninferiority_verdict",
    "threshold_verdict",
    "combine",
    "seed_ci",
    "max_fraction_within",
    "knn_gap",
    "SUPPORTED",
    "NOT_SUPPORTED",
    "UNDECIDED",
    "NOT_MEASURED",
    "VERDICTS",
    "DELTA",
    "Claim",
    "claim",
    "registered",
    "ZERO_SHOT_RUN",
    "SPREAD_MIN",
    "LOW_SHOTS",
    "FEWSHOT_TARGETS",
    "PRUNE_MAX_LOSS",
    "PRUNE_COMPARE_AT",
    "PRUNE_CONTROL_AT",
    "MN_COLLAPSE",
    "NLVR_CONTROLS",
    "PIO",
    "NAC",
]
