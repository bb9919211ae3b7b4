"""nac.report.claims: the CI math (against scipy), every branch of the verdict rule, the claims on
synthetic metrics (supported / not supported / inconclusive, n < 2, missing and malformed files)
and one pass over the repository's real metrics."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from nac.report import claims as C
from nac.report.claims import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, Interval

ROOT = Path(__file__).resolve().parents[1]
PRIORS = ["nac-scale_free", "nac-planted_partition", "nac-ring_of_cliques", "nac-erdos_renyi"]
LADDER = ["perceiver_io", "modfc", "frozen_graph", *PRIORS]


# ---------------------------------------------------------------------------- CI math
def _close(iv: Interval, ci) -> None:
    assert iv.lo == pytest.approx(ci.low, rel=1e-9) and iv.hi == pytest.approx(ci.high, rel=1e-9)


def test_mean_ci_matches_scipy():
    x = [3.1, 4.7, 2.2, 5.0, 3.9]
    iv = C.mean_ci(x)
    assert iv.estimate == pytest.approx(np.mean(x)) and iv.n == 5
    _close(iv, stats.ttest_1samp(x, 0.0).confidence_interval(0.95))


def test_welch_ci_matches_scipy():
    a, b = [60.1, 61.4, 59.8], [58.0, 59.9, 57.2, 58.8]
    iv = C.welch_ci(a, b)
    assert iv.estimate == pytest.approx(np.mean(a) - np.mean(b)) and iv.n == 3
    _close(iv, stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95))


def test_paired_ci_matches_scipy():
    a, b = [40.0, 42.5, 39.0, 45.0], [31.0, 35.5, 33.0, 30.0]
    _close(C.paired_ci(a, b), stats.ttest_rel(a, b).confidence_interval(0.95))


def test_no_ci_below_two_values_and_degenerate_spread():
    assert C.mean_ci([5.0]) == Interval(5.0, None, None, 1)
    assert C.welch_ci([1.0], [0.0, 2.0]) == Interval(0.0, None, None, 1)
    assert C.welch_ci([2.0, 2.0], [1.0, 1.0]) == Interval(1.0, 1.0, 1.0, 2)


# ---------------------------------------------------------------------------- the rule
@pytest.mark.parametrize("iv, verdict, says", [
    (Interval(2.0, 0.5, 3.5, 3), SUPPORTED, "lower bound"),
    (Interval(-2.0, -3.5, -0.5, 3), NOT_SUPPORTED, "upper bound"),
    (Interval(0.2, -0.3, 0.8, 3), NOT_SUPPORTED, "below δ"),
    (Interval(0.5, 0.2, 0.8, 3), SUPPORTED, "lower bound"),   # supported is checked first
    (Interval(1.0, -1.0, 3.0, 3), INCONCLUSIVE, "contains 0"),
    (Interval(3.0, None, None, 1), INCONCLUSIVE, "n < 2"),
])
def test_difference_verdict(iv, verdict, says):
    v, reason = C.difference_verdict(iv)
    assert v == verdict and says in reason


def test_difference_verdict_custom_delta():
    assert C.difference_verdict(Interval(0.2, -0.3, 0.8, 3), delta=0.5)[0] == INCONCLUSIVE


@pytest.mark.parametrize("iv, verdict", [
    (Interval(0.1, -0.4, 0.6, 3), SUPPORTED),
    (Interval(0.5, 0.2, 0.8, 3), SUPPORTED),        # within ±δ wins over "excludes 0"
    (Interval(2.0, 1.5, 2.5, 3), NOT_SUPPORTED),
    (Interval(-2.0, -2.5, -1.5, 3), NOT_SUPPORTED),
    (Interval(0.5, -0.5, 1.5, 3), INCONCLUSIVE),
    (Interval(0.0, None, None, 1), INCONCLUSIVE),
])
def test_equivalence_verdict(iv, verdict):
    assert C.equivalence_verdict(iv)[0] == verdict


@pytest.mark.parametrize("iv, strict, verdict, says", [
    (Interval(0.9, 0.8, 1.0, 3), False, SUPPORTED, "lower bound"),
    (Interval(0.7, 0.6, 0.79, 3), False, NOT_SUPPORTED, "upper bound"),
    (Interval(0.8, 0.7, 0.9, 3), False, INCONCLUSIVE, "contains"),
    (Interval(0.8, None, None, 1), False, SUPPORTED, "single measurement"),
    (Interval(0.79, None, None, 1), False, NOT_SUPPORTED, "single measurement"),
    (Interval(0.8, 0.8, 0.8, 3), True, NOT_SUPPORTED, "upper bound"),   # above chance: at chance is not above
    (Interval(0.8, None, None, 1), True, NOT_SUPPORTED, "single measurement"),
    (Interval(0.9, 0.81, 1.0, 3), True, SUPPORTED, "lower bound"),
])
def test_threshold_verdict(iv, strict, verdict, says):
    v, reason = C.threshold_verdict(iv, 0.8, strict=strict)
    assert v == verdict and says in reason


def test_combine():
    s, n, i = ("a", SUPPORTED, "ok"), ("b", NOT_SUPPORTED, "bad"), ("c", INCONCLUSIVE, "maybe")
    assert C.combine([s, s])[0] == SUPPORTED
    assert C.combine([s, i, n]) == (NOT_SUPPORTED, "not supported: b (bad)")
    assert C.combine([s, i]) == (INCONCLUSIVE, "inconclusive: c (maybe)")


def test_max_fraction_within_stops_at_first_failure():
    curve = [{"dropped_fraction": f, "acc1": a} for f, a in [(0.0, 50), (0.5, 48), (0.75, 46), (0.875, 49)]]
    assert C.max_fraction_within(curve)["dropped_fraction"] == 0.5
    assert C.max_fraction_within(curve[:1])["dropped_fraction"] == 0.0


# ---------------------------------------------------------------------------- synthetic metrics
def make_params(seeds=(0, 1, 2), targets=("digits",)) -> dict:
    tracks = {t: {"runs": ["perceiver_io", "nac"]} for t in ("points", "listops", "text")}
    return {"profile": "test", "seeds": list(seeds), "prior": {"name": "scale_free"},
            "image": {"ladder": list(LADDER)}, "prune": {"runs": ["perceiver_io", *PRIORS]},
            "fewshot": {"targets": list(targets)}, "nlvr": {"runs": ["conditional", "text_only", "image_only"]}, **tracks}


def _dump(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def good_spec() -> dict:
    """Numbers under which every measured claim is supported (per seed lists)."""
    tight = lambda base: [base, base + 0.2, base + 0.4]  # noqa: E731
    return {
        "iid": {"perceiver_io": tight(50.0), "modfc": [50.1, 50.2, 50.3], "frozen_graph": tight(45.0),
                "nac-scale_free": tight(55.0), "nac-planted_partition": [55.1, 55.2, 55.3],
                "nac-ring_of_cliques": tight(55.0), "nac-erdos_renyi": [55.05, 55.2, 55.35]},
        "ood": {"perceiver_io": tight(20.0), "modfc": tight(20.0), "frozen_graph": tight(20.0), "nac-scale_free": tight(25.0),
                "nac-planted_partition": tight(25.0), "nac-ring_of_cliques": tight(26.0), "nac-erdos_renyi": tight(25.0)},
        # per seed: acc1 at fractions 0, 0.5, 0.75, 0.875
        "prune": {"perceiver_io": [[50, 45, 40 + s, 30] for s in range(3)],
                  **{r: [[50, 49.5, 49, 48] for _ in range(3)] for r in PRIORS}},
        "speed": [100.0, 200.0, 400.0, 1000.0],
        # (episode, shots) -> (nac, pio); shots 8 carries a large negative gap that must be ignored
        "fewshot": {(e, k): (40.0 + e + k, 30.0 + k + 0.1 * e) if k <= 4 else (0.0, 90.0)
                    for e in range(3) for k in (1, 2, 4, 8)},
        "tracks": {t: {"nac": [80.0, 81.0, 82.0], "perceiver_io": [70.0, 71.0, 72.0], "chance": 10.0}
                   for t in ("points", "listops", "text")},
        "nlvr": {"conditional": [70.0, 71.0, 72.0], "text_only": [55.0, 56.0, 57.0], "image_only": [52.0, 52.5, 53.0],
                 "chance": 50.0},
        "analysis": {"knn_accuracy": 80.0, "knn_accuracy_ci95": 5.0, "knn_shuffled": 25.0, "knn_shuffled_ci95": 4.0,
                     "folds": 5, "silhouette": 0.2, "silhouette_shuffled": 0.0, "p_spread": 0.05, "chance": 25.0, "n": 100,
                     "untrained": {"knn_accuracy": 40.0, "knn_accuracy_ci95": 6.0, "silhouette": 0.05}},
    }


def write_metrics(root: Path, spec: dict, seeds=(0, 1, 2)) -> Path:
    for run in LADDER:
        for i, s in enumerate(seeds):
            _dump(root / "image/eval" / f"{run}-{s}.json", {"run": run, "seed": s, "iid_acc1": spec["iid"][run][i],
                                                            "ood_acc1": spec["ood"][run][i], "iid_acc5": 90.0, "ood_acc5": 60.0})
    rows = []
    for run, per_seed in spec["prune"].items():
        for i, s in enumerate(seeds):
            for j, f in enumerate((0.0, 0.5, 0.75, 0.875)):
                row = {"run": run, "seed": s, "dropped_fraction": f, "acc1": per_seed[i][j], "device": "CPU"}
                rows.append(row | ({"images_per_s": spec["speed"][j]} if i == 0 else {}))
    _dump(root / "image/prune.json", rows)
    fs = [{"target": "digits", "run": run, "episode": e, "shots": k, "acc1": accs[j]}
          for (e, k), accs in spec["fewshot"].items() for j, run in enumerate(("nac", "perceiver_io"))]
    _dump(root / "fewshot/digits.json", {"target": "digits", "rows": fs})
    tracks = {**spec["tracks"], "nlvr": spec["nlvr"]}
    for track, runs in tracks.items():
        for run, accs in runs.items():
            if run == "chance":
                continue
            for i, s in enumerate(seeds):
                _dump(root / "tracks" / track / f"{run}-{s}.json",
                      {"run": run, "seed": s, "val_acc1": accs[i], "test_acc1": accs[i],
                       "val_chance": runs["chance"], "test_chance": runs["chance"]})
    _dump(root / "nlvr/analysis.json", spec["analysis"])
    return root


def by_id(rows: list[dict]) -> dict[str, dict]:
    return {r["id"]: r for r in rows}


def test_structure_learned_compares_with_the_untrained_control(tmp_path):
    params = make_params()
    spec = good_spec()
    spec["analysis"]["untrained"] = {"knn_accuracy": 79.0, "knn_accuracy_ci95": 5.0, "silhouette": 0.19}
    row = by_id(C.evaluate_claims(params, write_metrics(tmp_path / "m1", spec)))["nlvr_structure_learned"]
    assert row["verdict"] == INCONCLUSIVE and row["estimate"] == pytest.approx(1.0)
    assert row["hi"] == pytest.approx(1.0 + math.hypot(5.0, 5.0))
    del spec["analysis"]["untrained"]
    row = by_id(C.evaluate_claims(params, write_metrics(tmp_path / "m2", spec)))["nlvr_structure_learned"]
    assert row["verdict"] == INCONCLUSIVE and row["reason"].startswith("not measured")


def test_all_supported_on_good_metrics(tmp_path):
    params = make_params()
    rows = by_id(C.evaluate_claims(params, write_metrics(tmp_path / "metrics", good_spec())))
    assert tuple(rows) == C.claim_ids(params)
    for cid, r in rows.items():
        assert set(r) == set(C.FIELDS)
        expected = INCONCLUSIVE if cid == "nlvr_two_cliques" else SUPPORTED
        assert r["verdict"] == expected, (cid, r["reason"], r["ours"])
    assert rows["nlvr_two_cliques"]["reason"].startswith("not measured")
    # the numbers are the rule's: Welch for the image ladder, paired over episodes for few-shot
    g = good_spec()
    ci = stats.ttest_ind(g["ood"]["nac-scale_free"], g["ood"]["perceiver_io"], equal_var=False).confidence_interval()
    assert (rows["ood_gain"]["lo"], rows["ood_gain"]["hi"]) == (pytest.approx(ci.low), pytest.approx(ci.high))
    per_ep = [np.mean([g["fewshot"][e, k][0] - g["fewshot"][e, k][1] for k in (1, 2, 4)]) for e in range(3)]
    ci = stats.ttest_1samp(per_ep, 0.0).confidence_interval()
    fs = rows["fewshot_digits"]
    assert fs["estimate"] == pytest.approx(np.mean(per_ep)) and fs["n"] == 3
    assert (fs["lo"], fs["hi"]) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert rows["nlvr_type_structure"]["lo"] == pytest.approx(55.0 - math.hypot(5.0, 4.0))
    assert rows["prune_fraction"]["estimate"] == pytest.approx(0.875)
    assert rows["prune_speedup"]["estimate"] == pytest.approx(10.0) and rows["prune_speedup"]["n"] == 1
    assert rows["prune_vs_pio"]["estimate"] == pytest.approx(np.mean([10, 9, 8]) - 1.0)
    assert "stand-in" in rows["nlvr_vs_zeroshot"]["measure"]


def _verdicts(tmp_path, mutate, seeds=(0, 1, 2)) -> dict[str, dict]:
    spec = good_spec()
    mutate(spec)
    return by_id(C.evaluate_claims(make_params(seeds), write_metrics(tmp_path / "metrics", spec, seeds)))


def test_not_supported_branches(tmp_path):
    def bad(spec):
        spec["ood"]["nac-scale_free"] = [18.0, 18.2, 18.4]                       # NAC worse OOD: CI < 0
        spec["iid"]["modfc"] = [53.0, 53.2, 53.4]                                # ModFC changes IID: CI excludes 0
        spec["iid"]["nac-erdos_renyi"] = [58.0, 58.2, 58.4]                      # one prior differs
        spec["prune"]["nac-scale_free"] = [[50, 40, 39, 38] for _ in range(3)]    # fails at the first drop
        spec["speed"] = [100.0, 110.0, 120.0, 150.0]
        spec["fewshot"] = {(e, k): (30.0 + 0.1 * e, 30.0) for e in range(3) for k in (1, 2, 4)}  # d < δ
        spec["tracks"]["points"]["nac"] = [10.0, 10.0, 10.0]                     # at chance
        spec["analysis"]["p_spread"] = 0.001
    rows = _verdicts(tmp_path, bad)
    expect = {"ood_gain": "< 0", "modfc_alone": "excludes 0", "priors_similar": "excludes 0",
              "prune_fraction": "upper bound", "prune_speedup": "single measurement", "fewshot_digits": "below δ",
              "above_chance": "points/nac", "nlvr_diversity": "single measurement"}
    for cid, says in expect.items():
        assert rows[cid]["verdict"] == NOT_SUPPORTED and says in rows[cid]["reason"], (cid, rows[cid]["reason"])
    assert rows["prune_fraction"]["estimate"] == 0.0 and rows["prune_speedup"]["estimate"] == 1.0


def test_inconclusive_branches(tmp_path):
    def wide(spec):
        spec["ood"]["nac-scale_free"] = [14.0, 22.0, 30.0]
        spec["iid"]["modfc"] = [47.0, 50.0, 53.0]
        spec["iid"]["nac-erdos_renyi"] = [52.0, 55.0, 58.0]
        spec["prune"]["nac-scale_free"] = [[50, 49, 48, 48], [50, 40, 40, 40], [50, 49, 48, 48]]  # 0.875, 0, 0.875
        spec["tracks"]["listops"]["nac"] = [5.0, 15.0, 25.0]                     # CI straddles chance
    rows = _verdicts(tmp_path, wide)
    for cid in ("ood_gain", "modfc_alone", "priors_similar", "prune_fraction", "above_chance"):
        assert rows[cid]["verdict"] == INCONCLUSIVE, (cid, rows[cid]["reason"])
    assert "listops/nac" in rows["above_chance"]["reason"]


def test_single_seed_gives_no_ci(tmp_path):
    rows = _verdicts(tmp_path, lambda spec: None, seeds=(0,))
    for cid in ("ood_gain", "iid_gain", "modfc_alone", "learned_graph", "prior_tradeoff_ood", "prune_vs_pio",
                "points_gap", "nlvr_vs_zeroshot"):
        assert rows[cid]["verdict"] == INCONCLUSIVE and rows[cid]["reason"].startswith("n < 2"), cid
        assert rows[cid]["lo"] is None and rows[cid]["hi"] is None
    assert rows["priors_similar"]["verdict"] == INCONCLUSIVE
    pf = rows["prune_fraction"]       # a threshold claim: the single value is compared, lo = hi = estimate
    assert pf["verdict"] == SUPPORTED and "single measurement" in pf["reason"] and pf["lo"] == pf["hi"] == 0.875
    assert rows["above_chance"]["verdict"] == SUPPORTED
    assert rows["fewshot_digits"]["verdict"] == SUPPORTED   # episodes, not seeds


def test_missing_metrics_are_not_measured(tmp_path):
    params = make_params(targets=("digits", "shapes_novel"))
    rows = C.evaluate_claims(params, tmp_path / "nothing")
    assert tuple(r["id"] for r in rows) == C.claim_ids(params)
    for r in rows:
        assert r["verdict"] == INCONCLUSIVE and r["reason"].startswith("not measured: ")
        assert r["estimate"] is None and r["n"] == 0
    assert "fewshot/shapes_novel.json" in by_id(rows)["fewshot_shapes_novel"]["reason"]
    # partly there: one seed file gone, the few-shot target without low-shot rows, one track model missing
    root = write_metrics(tmp_path / "metrics", good_spec())
    (root / "image/eval/perceiver_io-2.json").unlink()
    (root / "tracks/text/nac-1.json").unlink()
    rows = by_id(C.evaluate_claims(params, root))
    assert "perceiver_io-<seed>.json (seeds 2)" in rows["ood_gain"]["reason"]
    assert rows["learned_graph"]["verdict"] == SUPPORTED
    assert rows["text_gap"]["reason"].startswith("not measured")
    assert rows["above_chance"]["verdict"] == INCONCLUSIVE and "text/nac (not measured)" in rows["above_chance"]["reason"]


def test_unconfigured_runs_are_not_read(tmp_path):
    params = make_params()
    params["image"]["ladder"] = ["perceiver_io", "nac-scale_free"]
    rows = by_id(C.evaluate_claims(params, write_metrics(tmp_path / "metrics", good_spec())))
    assert rows["ood_gain"]["verdict"] == SUPPORTED
    assert "modfc (not configured" in rows["modfc_alone"]["reason"]
    assert rows["priors_similar"]["reason"] == "not measured: fewer than 2 priors in image.ladder"


@pytest.mark.parametrize("break_it, match", [
    (lambda r: (r / "image/eval/modfc-0.json").write_text("{not json"), "malformed metrics file"),
    (lambda r: (r / "image/eval/perceiver_io-0.json").write_text(json.dumps({"iid_acc1": 1.0})), "no key 'ood_acc1'"),
    (lambda r: (r / "tracks/points/nac-0.json").write_text(json.dumps({"test_acc1": "high"})), "not a finite number"),
    (lambda r: (r / "nlvr/analysis.json").write_text(json.dumps({"knn_accuracy": 1.0})), "no key"),
    (lambda r: (r / "image/prune.json").write_text(json.dumps({"rows": []})), "list of rows"),
])
def test_malformed_metrics_raise(tmp_path, break_it, match):
    root = write_metrics(tmp_path / "metrics", good_spec())
    break_it(root)
    with pytest.raises(ValueError, match=match):
        C.evaluate_claims(make_params(), root)


def test_unpaired_fewshot_episodes_raise(tmp_path):
    spec = good_spec()
    root = write_metrics(tmp_path / "metrics", spec)
    data = json.loads((root / "fewshot/digits.json").read_text())
    data["rows"] = [r for r in data["rows"] if not (r["run"] == "nac" and r["episode"] == 2 and r["shots"] == 1)]
    (root / "fewshot/digits.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="not paired"):
        C.evaluate_claims(make_params(), root)


def test_write_claims(tmp_path):
    params = make_params()
    md = C.write_claims(params, write_metrics(tmp_path / "metrics", good_spec()), tmp_path / "reports")
    assert md == tmp_path / "reports/claims.md"
    text = md.read_text()
    assert "Profile **test**" in text and "at this profile's scale" in text and C.RULE in text
    assert text.index("Verdict rule") < text.index("| id")
    header = next(line for line in text.splitlines() if line.startswith("| id"))
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "id", "source", "claim", "paper", "our measurement (95% CI)", "verdict", "reason"]
    for cid in C.claim_ids(params):
        assert f"| {cid} " in text
    csv = pd.read_csv(tmp_path / "reports/tables/claims.csv")
    assert list(csv.columns) == list(C.FIELDS) and tuple(csv["id"]) == C.claim_ids(params)
    assert set(csv["verdict"]) <= {SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE}


def test_claim_ids():
    ids = C.claim_ids(make_params(targets=("cub", "cifar10")))
    assert ids[:len(C.CLAIM_IDS)] != C.CLAIM_IDS and set(C.CLAIM_IDS) < set(ids)
    assert ids[ids.index("prune_vs_pio") + 1:ids.index("points_gap")] == ("fewshot_cub", "fewshot_cifar10")
    assert len(set(ids)) == len(ids)


@pytest.mark.skipif(not (ROOT / "metrics/image/eval").is_dir() or not (ROOT / "params.yaml").is_file(),
                    reason="no real metrics in this checkout")
def test_real_metrics_get_a_verdict(tmp_path):
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    md = C.write_claims(params, ROOT / "metrics", tmp_path)
    rows = C.evaluate_claims(params, ROOT / "metrics")
    assert tuple(r["id"] for r in rows) == C.claim_ids(params)
    assert all(r["verdict"] in (SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE) and r["reason"] for r in rows)
    assert md.is_file() and (tmp_path / "tables/claims.csv").is_file()
