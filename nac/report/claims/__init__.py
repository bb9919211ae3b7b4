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
claim the verdict "inconclusive" with the reason "not measured: <what is missing>"; a malformed one
(bad JSON, a missing key, a non-numeric value, unpaired few-shot episodes) raises ``ValueError``.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

# the topic modules register their claims on import (the report order is registry.TOPICS, not this order)
from nac.report.claims import baselines, fewshot, image, mechanism, nlvr, prune, tracks  # noqa: F401
from nac.report.claims.baselines import MN_COLLAPSE
from nac.report.claims.fewshot import FEWSHOT_TARGETS, LOW_SHOTS
from nac.report.claims.metrics import NAC, NLVR_CONTROLS, PIO
from nac.report.claims.nlvr import SPREAD_MIN, ZERO_SHOT_RUN, knn_gap
from nac.report.claims.prune import PRUNE_COMPARE_AT, PRUNE_CONTROL_AT, PRUNE_MAX_LOSS, max_fraction_within
from nac.report.claims.registry import FIELDS, Claim, claim, claim_ids, evaluate_claims, registered
from nac.report.claims.rules import (DELTA, INCONCLUSIVE, NOT_SUPPORTED, RULE, SUPPORTED, VERDICTS, combine,
                                     difference_verdict, equivalence_verdict, noninferiority_verdict, seed_ci,
                                     threshold_verdict)
from nac.stats import Interval, mean_ci, paired_ci, welch_ci

CLAIM_IDS: tuple[str, ...] = tuple(c.name for c in registered() if c.per is None)


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
           "welch_ci", "paired_ci", "difference_verdict", "equivalence_verdict", "noninferiority_verdict",
           "threshold_verdict", "combine", "seed_ci", "max_fraction_within", "knn_gap", "SUPPORTED", "NOT_SUPPORTED",
           "INCONCLUSIVE", "VERDICTS", "DELTA", "Claim", "claim", "registered", "ZERO_SHOT_RUN", "SPREAD_MIN",
           "LOW_SHOTS", "FEWSHOT_TARGETS", "PRUNE_MAX_LOSS", "PRUNE_COMPARE_AT", "PRUNE_CONTROL_AT", "MN_COLLAPSE",
           "NLVR_CONTROLS", "PIO", "NAC"]
