"""The report builders of Tables 2 and 3, the NLVR tables, Figure 4 (few-shot), Figure 6 and the
tracks' learning curves, on small synthetic metrics: every cell filled, the confidence intervals
equal scipy's, and the whole build (image part stubbed) writes every file the README links."""

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from nac import provenance
from nac.report import bench_figures, build, figures, graph_figures, nlvr_tables, tables
from nac.report.claims import claims_metrics as real_claims_metrics
from nac.report.claims import headline as real_headline
from nac.report.published import TABLE2, TABLE3, TRACK_LABELS
from nac.stats import summarize

SEEDS = [0, 1, 2]
RUNS = {
    "points": ["perceiver_io", "nac"],
    "listops": ["perceiver_io", "nac"],
    "text": ["perceiver_io", "nac"],
    "nlvr": ["conditional", "text_only", "image_only"],
}
TYPES = ["hard_cardinality", "soft_cardinality", "existential", "spatial"]
TARGETS, SHOTS, EPISODES, U = ["digits", "shapes_novel"], [1, 2, 4, 8, 16], 4, 8


def _params() -> dict:
    return {
        "profile": "smoke",
        "seeds": SEEDS,
        "prior": {"name": "scale_free"},
        **{t: {"dataset": f"{t}_data", "runs": runs} for t, runs in RUNS.items()},
        "fewshot": {
            "source": "image",
            "targets": TARGETS,
            "protocol": {
                "ways": 8,
                "shots": SHOTS,
                "episodes": EPISODES,
                "queries_per_class": 4,
                "steps": 3,
                "lr": 1e-3,
                "freeze": ["tokenizer"],
            },
        },
    }


def _track_result(track: str, run: str, seed: int, rng: np.random.Generator) -> dict:
    acc = lambda: float(rng.uniform(30, 90))  # noqa: E731
    res = {
        "track": track,
        "dataset": f"{track}_data",
        "run": run,
        "seed": seed,
        "parameters": 1000,
        "history": [
            {
                "epoch": e,
                "train_loss": 1.0 / e,
                "train_reg": 0.0,
                "train_acc": acc(),
                "lr": 1e-3,
                "val_acc1": acc(),
                "val_acc5": 100.0,
            }
            for e in (1, 2, 3)
        ],
        "val_acc1": acc(),
        "val_chance": 25.0,
        "val_n": 100,
        "test_acc1": acc(),
        "test_chance": 20.0,
        "test_n": 100,
    }
    if track == "nlvr":
        res["val_acc1_by_type"] = {t: acc() for t in TYPES}
        res["test_acc1_by_type"] = {t: acc() for t in TYPES}
    return res


def write_metrics(root: Path, seed: int = 0) -> Path:
    """A synthetic ``metrics/`` of the tracks, few-shot and NLVR analysis (the files the stages write)."""
    rng = np.random.default_rng(seed)
    metrics = root / "metrics"
    for track, runs in RUNS.items():
        (metrics / "tracks" / track).mkdir(parents=True)
        for run in runs:
            for s in SEEDS:
                (metrics / "tracks" / track / f"{run}-{s}.json").write_text(
                    json.dumps(_track_result(track, run, s, rng))
                )
    (metrics / "fewshot").mkdir()
    for target in TARGETS:
        rows = [
            {
                "target": target,
                "run": run,
                "model": model,
                "shots": k,
                "episode": e,
                "model_index": e % 3,
                "acc1": float(np.clip(20 + 8 * np.log2(k) + (5 if run == "nac" else 0) + rng.normal(0, 4), 0, 100)),
                "n_query": 32,
                "classes": list(range(8)),
            }
            for run, model in (("perceiver_io", "perceiver_io"), ("nac", "nac-scale_free"))
            for k in SHOTS
            for e in range(EPISODES)
        ]
        rng.shuffle(rows)  # pairing must go by (shots, episode), not by row order
        (metrics / "fewshot" / f"{target}.json").write_text(
            json.dumps(
                {"target": target, "source": "image", "protocol": _params()["fewshot"]["protocol"], "rows": rows}
            )
        )
    (metrics / "nlvr").mkdir()
    analysis = {
        "n": 40,
        "pca_dim": 16,
        "pca_explained": 0.93,
        "knn_k": 5,
        "folds": 3,
        "chance": 25.0,
        "p_spread": 0.02,
        "p_mean": 0.8,
        "knn_accuracy": 70.0,
        "knn_accuracy_ci95": 8.0,
        "knn_shuffled": 26.0,
        "knn_shuffled_ci95": 5.0,
        "silhouette": 0.12,
        "silhouette_shuffled": -0.01,
        "run": "conditional",
        "seed": 0,
        "split": "val",
        "reasoning_types": TYPES,
        "modules": U,
        "bandwidth": 1.0,
        "count_by_type": {t: 10 for t in TYPES},
    }
    (metrics / "nlvr" / "analysis.json").write_text(json.dumps(analysis))
    embedding = pd.DataFrame(
        {
            "x": rng.normal(size=40),
            "y": rng.normal(size=40),
            "reasoning_type": TYPES * 10,
            "sentence": ["there is a red square"] * 40,
            "label": [1, 0] * 20,
        }
    )
    embedding.to_csv(metrics / "nlvr" / "embedding.csv", index=False)
    examples = []
    for i, t in enumerate(TYPES):
        P = np.exp(-(1 - np.clip(rng.uniform(-1, 1, (U, U)), -1, 1)))
        P = (P + P.T) / 2
        np.fill_diagonal(P, 1.0)
        examples.append(
            {"reasoning_type": t, "index": i, "sentence": f"a long sentence of type {t} " * 3, "P": P.tolist()}
        )
    (metrics / "nlvr" / "examples.json").write_text(
        json.dumps({"threshold": 0.5, "bandwidth": 1.0, "examples": examples})
    )
    return metrics


def _no_empty_cells(df: pd.DataFrame) -> None:
    assert not df.isna().any().any(), df
    assert not (df.astype(str).apply(lambda c: c.str.strip()) == "").any().any(), df


def _csv_is_full(path: Path) -> pd.DataFrame:
    df = pd.read_csv(path)
    _no_empty_cells(df)
    return df


@pytest.mark.parametrize("a, b", [([70.1, 72.5, 69.8], [74.0, 73.2, 77.9]), ([1.0, 2.0, 4.0, 8.0], [3.0, 3.5, 9.0])])
def test_welch_ci_equals_scipy(a, b):
    ci = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    res = tables.welch(a, b)
    assert res["mean"] == pytest.approx(np.mean(a) - np.mean(b))
    assert res["ci95"] == pytest.approx((ci.high - ci.low) / 2)


def test_paired_ci_equals_scipy_and_single_values_have_no_ci():
    a, b = [10.0, 20.0, 30.0, 45.0], [14.0, 21.0, 37.0, 46.0]
    ci = stats.ttest_rel(a, b).confidence_interval(0.95)
    assert tables.paired(a, b)["mean"] == pytest.approx(np.mean(a) - np.mean(b))
    assert tables.paired(a, b)["ci95"] == pytest.approx((ci.high - ci.low) / 2)
    assert summarize([1.0, 2.0, 6.0])["ci95"] == pytest.approx(
        stats.t.ppf(0.975, 2) * np.std([1, 2, 6], ddof=1) / np.sqrt(3)
    )
    assert tables.welch([60.0], [50.0]) == {"mean": 10.0, "ci95": 0.0, "n": 1}
    assert tables.welch([60.0, 60.0], [50.0, 50.0])["ci95"] == 0.0


def test_one_sign_convention_a_minus_b_everywhere():
    """``tables.paired``/``tables.welch`` and ``stats.paired_ci``/``stats.welch_ci`` all return a − b
    (they once disagreed: the tables' forms returned b − a), with scipy's intervals."""
    from nac.stats import paired_ci, welch_ci

    a, b = [5.0, 7.0, 6.5], [1.0, 2.0, 4.0]
    for iv, ref in ((paired_ci(a, b), stats.ttest_rel(a, b)), (welch_ci(a, b), stats.ttest_ind(a, b, equal_var=False))):
        ci = ref.confidence_interval()
        assert iv.estimate > 0 and (iv.lo, iv.hi) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert tables.paired(a, b)["mean"] > 0 and tables.welch(a, b)["mean"] > 0


def test_t_intervals_equal_the_textbook_formula():
    from nac.stats import mean_ci, t_half_width

    rng = np.random.default_rng(0)
    for n in (2, 3, 5, 17):
        x = rng.normal(50, 7, n)
        textbook = float(stats.t.ppf(0.975, n - 1) * np.std(x, ddof=1) / np.sqrt(n))
        assert summarize(x.tolist())["ci95"] == textbook == t_half_width(x)
        ci = stats.ttest_1samp(x, 0.0).confidence_interval()
        assert t_half_width(x) == pytest.approx((ci.high - ci.low) / 2, rel=1e-12)  # scipy's interval
        assert summarize(x.tolist())["mean"] == float(x.mean()) and summarize(x.tolist())["n"] == n
        iv = mean_ci(x)
        assert (iv.lo, iv.hi) == (
            pytest.approx(x.mean() - textbook, rel=1e-12),
            pytest.approx(x.mean() + textbook, rel=1e-12),
        )
    assert summarize([3.0]) == {"mean": 3.0, "ci95": 0.0, "n": 1} and t_half_width([3.0]) == 0.0


def test_tables_2_and_3_have_every_cell_and_the_right_numbers(tmp_path):
    metrics = write_metrics(tmp_path)
    results = {t: tables.read_track(metrics, t, RUNS[t], SEEDS) for t in ("listops", "text")}
    display, summary = tables.comparison_table(results, TABLE3, TRACK_LABELS, "ours: scale-free prior")
    tables.write_table(display, tmp_path / "tables", "table3", ".2f")
    df = _csv_is_full(tmp_path / "tables" / "table3.csv")
    assert len(df) == len(TABLE3) + 2 and "Linformer" in set(df["model"])
    nac = [r["test_acc1"] for r in results["listops"] if r["run"] == "nac"]
    pio = [r["test_acc1"] for r in results["listops"] if r["run"] == "perceiver_io"]
    s, d = summarize(nac), tables.paired(nac, pio)
    row = df.set_index("model").loc["NAC (ours: scale-free prior)"]
    (n_test,) = {r["test_n"] for r in results["listops"]}
    se = 100 * (s["mean"] / 100 * (1 - s["mean"] / 100) / n_test) ** 0.5  # the binomial SE, by hand
    assert row["ListOps: ours"] == f"{s['mean']:.2f} ± {s['ci95']:.2f} (SE {se:.2f})"
    assert not any("ours − paper" in c for c in df.columns)  # absolute accuracies of other datasets: never subtracted
    diff_row = df.set_index("model").loc["NAC − Perceiver IO (95% CI, paired by seed)"]
    assert diff_row["ListOps: ours"] == f"{d['mean']:.2f} ± {d['ci95']:.2f}"
    assert diff_row["ListOps: paper"] == f"{41.40 - 39.70:+.2f}"
    assert summary["listops"]["nac_minus_perceiver_io"]["paper"] == pytest.approx(41.40 - 39.70)
    assert summary["text"]["test_chance"] == 20.0
    points = {"points": tables.read_track(metrics, "points", RUNS["points"], SEEDS)}
    display2, _ = tables.comparison_table(points, TABLE2, TRACK_LABELS, "ours: scale-free prior")
    _no_empty_cells(display2)
    assert list(display2["model"][:4]) == [
        "Hierarchical Perceiver (no MAE)",
        "Perceiver IO",
        "Hierarchical Perceiver (with MAE)",
        "NAC (ours: scale-free prior)",
    ]


def test_missing_track_metrics_are_named(tmp_path):
    metrics = write_metrics(tmp_path)
    (metrics / "tracks" / "points" / "nac-1.json").unlink()
    with pytest.raises(FileNotFoundError, match="nac-1.json"):
        tables.read_track(metrics, "points", RUNS["points"], SEEDS)


def test_nlvr_tables_are_full(tmp_path):
    metrics = write_metrics(tmp_path)
    results = tables.read_track(metrics, "nlvr", RUNS["nlvr"], SEEDS)
    analysis = json.loads((metrics / "nlvr" / "analysis.json").read_text())
    acc, by_type, measures, summary = nlvr_tables.nlvr_tables(results, RUNS["nlvr"], analysis, "not computed")
    for name, df in (("nlvr", acc), ("nlvr_by_type", by_type), ("nlvr_analysis", measures)):
        tables.write_table(df, tmp_path / "tables", name, ".2f")
        _csv_is_full(tmp_path / "tables" / f"{name}.csv")
    assert len(acc) == 3 + 2 + 1 and acc.iloc[-1]["val Acc@1"] == "not computed"
    cond = [r["val_acc1"] for r in results if r["run"] == "conditional"]
    assert summary["runs"]["conditional"]["val_acc1"]["mean"] == pytest.approx(np.mean(cond))
    assert list(by_type.columns[1:]) == [f"{t.replace('_', ' ')} (n=10)" for t in TYPES]
    assert measures.iloc[0, 1] == "70.00 ± 8.00"


def test_fewshot_differences_are_paired_by_episode(tmp_path):
    metrics = write_metrics(tmp_path)
    rows = json.loads((metrics / "fewshot" / "digits.json").read_text())["rows"]
    st = tables.fewshot_stats(rows)
    assert set(st["shots"]) == set(SHOTS) and (st["n"] == EPISODES).all()
    df = pd.DataFrame(rows)
    for k in SHOTS:
        acc = {
            run: df[(df["run"] == run) & (df["shots"] == k)].sort_values("episode")["acc1"].to_numpy()
            for run in ("perceiver_io", "nac")
        }
        ci = stats.ttest_rel(acc["nac"], acc["perceiver_io"]).confidence_interval(0.95)
        got = st[(st["shots"] == k) & (st["run"] == "nac_minus_perceiver_io")].iloc[0]
        assert got["mean"] == pytest.approx((acc["nac"] - acc["perceiver_io"]).mean())
        assert got["ci95"] == pytest.approx((ci.high - ci.low) / 2)
    table = tables.fewshot_table({"digits": st})
    _no_empty_cells(table)
    assert list(table["shots"]) == SHOTS and (table["episodes"] == EPISODES).all()


def test_figures_4_6_and_track_curves_are_written(tmp_path):
    metrics = write_metrics(tmp_path)
    rows = {t: pd.DataFrame(json.loads((metrics / "fewshot" / f"{t}.json").read_text())["rows"]) for t in TARGETS}
    paths = figures.figure4(rows, SHOTS, 8, {"nac": "NAC"}, tmp_path / "figures")
    paths += graph_figures.figure6(
        pd.read_csv(metrics / "nlvr" / "embedding.csv"),
        json.loads((metrics / "nlvr" / "examples.json").read_text()),
        tmp_path / "figures",
    )
    results = {t: tables.read_track(metrics, t, RUNS[t], SEEDS) for t in RUNS}
    histories = {
        t: {run: [r["history"] for r in res if r["run"] == run] for run in RUNS[t]} for t, res in results.items()
    }
    paths += figures.learning_curves_tracks(histories, {t: 25.0 for t in RUNS}, {}, {}, tmp_path / "figures")
    assert [p.suffix for p in paths] == [".png", ".svg"] * 3
    assert all(p.stat().st_size > 1000 for p in paths)


def test_circuit_graph_edges_and_weights():
    P = np.array([[1.0, 0.9, 0.2], [0.9, 1.0, 0.6], [0.2, 0.6, 1.0]])
    g = graph_figures.circuit_graph(P, threshold=0.5, bandwidth=2.0)
    assert sorted(g.edges) == [(0, 1), (1, 2)] and g.number_of_nodes() == 3
    assert g.edges[0, 1]["weight"] == pytest.approx(1.0 / (-2.0 * np.log(0.9)))


def _stub_image_and_claims(monkeypatch, calls: list) -> None:
    """The image track's tables and the claims stubbed (the image track is covered by the smoke
    pipeline test): ``calls`` receives each ``write_claims``' ``(metrics, out)``."""

    def fake_image(params, out, metrics, models, md, figs, root):  # the image track: the smoke pipeline test
        for key in ("table1", "table1_styles", "mechanism", "distance_init", "distance_final", "prune_random"):
            md[key] = f"| {key} |"
        for key in ("figure3", "figure5a", "figure5b", "figure15", "learning_curves"):
            figs[key] = [out / "figures" / f"{key}.png"]
        return {
            "table1": {"perceiver_io/iid_acc1": {"mean": 1.0, "ci95": 0.0, "paper": 58.89}},
            "prune": {
                "perceiver_io": {
                    "full_acc1": 1.0,
                    "max_fraction_within_3pts": 0.5,
                    "speedup_at_that_fraction": 1.5,
                    "speedup_ci95": 0.1,
                }
            },
        }

    rows = [
        {
            "id": "points_gap",
            "verdict": "supported",
            "reason": "CI above 0",
            "estimate": 1.5,
            "lo": 0.5,
            "hi": 2.5,
            "n": 3,
        },
        {
            "id": "iid_gain",
            "verdict": "undecided",
            "reason": "CI spans 0",
            "estimate": 0.1,
            "lo": -1.0,
            "hi": 1.2,
            "n": 3,
        },
        {
            "id": "nlvr_vs_zeroshot",
            "verdict": "not measured",
            "reason": "not measured: no CLIP",
            "estimate": None,
            "lo": None,
            "hi": None,
            "n": 0,
        },
    ]
    monkeypatch.setattr(build, "evaluate_claims", lambda params, metrics, flags=None: rows)
    monkeypatch.setattr(build, "headline", real_headline)
    monkeypatch.setattr(build, "claims_metrics", real_claims_metrics)
    monkeypatch.setattr(build, "registered", lambda: [])  # the fake rows' ids are findings.yaml's own keys
    monkeypatch.setattr(
        build,
        "write_claims",
        lambda params, metrics, out, rows, gated=None: calls.append((metrics, out)) or out / "claims.md",
    )
    monkeypatch.setattr(build, "_image", fake_image)


def test_build_report_writes_every_table_figure_and_section(tmp_path, monkeypatch):
    metrics = write_metrics(tmp_path)
    monkeypatch.chdir(tmp_path)
    calls = []
    _stub_image_and_claims(monkeypatch, calls)
    summary = build.build_report(_params(), out=tmp_path / "reports", metrics=metrics, root=tmp_path)

    reports = tmp_path / "reports"
    # claims.md is written with the rest into a staging folder that replaces reports/'s files at the end
    assert len(calls) == 1 and calls[0][0] == metrics and calls[0][1].parent == tmp_path
    assert not [p for p in tmp_path.iterdir() if ".staging-" in p.name]  # removed once committed
    for name in (
        "table2",
        "table3",
        "nlvr",
        "nlvr_by_type",
        "nlvr_analysis",
        "figure4_fewshot",
        "figure4_fewshot_numeric",
    ):
        assert (reports / "tables" / f"{name}.md").exists(), name
        _csv_is_full(reports / "tables" / f"{name}.csv")
    for name in ("figure4_fewshot", "figure6_nlvr_circuits", "learning_curves_tracks"):
        for ext in ("png", "svg"):
            assert (reports / "figures" / f"{name}.{ext}").stat().st_size > 1000, name
    for target in TARGETS:
        assert list(pd.read_csv(reports / "plots" / "fewshot" / f"{target}.csv")["shots"]) == SHOTS
    readme = (reports / "README.md").read_text()
    order = [
        "## Table 1",
        "## Figure 3",
        "## Figure 4",
        "## Figure 5",
        "## Table 2",
        "## Table 3",
        "## Figure 6",
        "## Figure 15",
        "### Learning curves",
    ]
    assert [readme.index(h) for h in order] == sorted(readme.index(h) for h in order)
    for link in (
        "claims.md",
        "(notebooks/)",
        "figures/figure4_fewshot.png",
        "figures/figure6_nlvr_circuits.png",
        "figures/learning_curves_tracks.png",
        "Hierarchical Perceiver (with MAE)",
        "36.37",
        "Tiny-ImageNet-R",
        "not computed: no CLIP weights offline / embedded profile",
    ):
        assert link in readme, link
    assert not re.search(r"\bnan\b", readme.lower())  # a missing number never prints as nan
    # no throughput stage results in this metrics tree: the paper-size Figure 5b says it is skipped
    assert "Figure 5b (smoke, trained)" in readme and "Figure 5b at the paper's size: skipped" in readme
    headline = json.loads((metrics / "summary.json").read_text())  # the DVC metric: verdict counts, headline claims
    counts = {k: headline[k] for k in ("supported", "not_supported", "undecided", "not_measured")}
    assert counts == {"supported": 1, "not_supported": 0, "undecided": 1, "not_measured": 1}
    assert headline["points_gap"] == {"estimate": 1.5, "lo": 0.5, "hi": 2.5, "n": 3}
    every = json.loads((metrics / "claims.json").read_text())  # `dvc metrics show`: every claim
    assert set(every) == {"points_gap", "iid_gain", "nlvr_vs_zeroshot"}
    assert every["iid_gain"] == {
        "estimate": 0.1,
        "lo": -1.0,
        "hi": 1.2,
        "n": 3,
        "verdict": "undecided",
        "deciding": {"estimate": None, "lo": None, "hi": None, "n": None, "test": ""},  # (a stub row: no tests)
        "detectable": None,
        "needed": None,
        "effect": None,
        "sensitivity": None,  # the run gate flagged no run it reads
    }
    # the findings come first, one row per claim: words, paper, ours with CI and n, verdict, control
    findings = readme[readme.index("## Findings") : readme.index("## Table 1")]
    assert "1 supported, 0 not supported, 1 undecided, 1 not measured (3 claims)" in findings
    cells = {  # claim id -> the row's cells
        re.search(r"claims\.md#(\w+)", line).group(1): [c.strip() for c in line.strip("|").split("|")]
        for line in findings.splitlines()
        if "claims.md#" in line
    }
    assert list(cells) == ["points_gap", "iid_gain", "nlvr_vs_zeroshot"]  # report order, every claim
    assert cells["points_gap"][1:4] == ["+5.6 pts", "+1.5 [+0.5, +2.5] pts, n = 3", "**supported**"]
    assert cells["iid_gain"][3] == "**undecided**" and cells["nlvr_vs_zeroshot"][2:4] == ["—", "**not measured**"]
    assert cells["points_gap"][4] == "—"  # the evidence: no deciding test or power in these stub rows
    assert cells["points_gap"][5] == "Perceiver IO, same seeds"  # the control it was judged against
    assert "inconclusive" not in readme
    reference = (reports / "reference.md").read_text()  # the engineering, apart
    assert "## Discrepancies" in reference and "## Discrepancies" not in readme
    assert "(discrepancies.md#" in reference and "## " in (reports / "discrepancies.md").read_text()
    fs = summary["fewshot"]["targets"]
    expected = np.mean([fs[t][str(k)]["nac_minus_perceiver_io"]["mean"] for t in TARGETS for k in (1, 2, 4)])
    assert summary["fewshot"]["nac_minus_perceiver_io_shots_1_4"] == pytest.approx(expected)
    assert json.loads((reports / "tables" / "summary.json").read_text())["nlvr"]["analysis"]["knn_accuracy"] == 70.0


def _converged_results(root: Path) -> Path:
    """A kept converged result set (tools/run_converged.py's layout) with its own synthetic metrics."""
    results = root / "results" / "converged"
    write_metrics(results, seed=1)  # other numbers than the default report's
    params = {**_params(), "profile": "converged"}
    (results / "params.yaml").write_text(yaml.safe_dump(params))
    prov = {
        "profile": "converged",
        "overrides": [],
        "commit": "0123456789abcdef",
        "dirty": False,
        "params_sha256": provenance.params_hash(params),
        "code": {},
        "machine": "gpu-host (Linux)",
        "device": "1 x NVIDIA H100 80GB HBM3",
        "start": "2026-11-24T10:00:00Z",
        "end": "2026-11-24T10:19:00Z",
    }
    (results / provenance.PROVENANCE).write_text(json.dumps(prov))
    return results


def test_a_kept_result_sets_figure_3_never_reads_models(tmp_path, monkeypatch):
    """Figure 3 of a kept result set comes from its graphs.json only: models/ holds another
    profile's checkpoints (here a file that would fail to load)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "image").mkdir(parents=True)
    (tmp_path / "models" / "image" / "nac-scale_free-0.pt").write_text("mini's checkpoint")
    results = tmp_path / "results"
    (results / "metrics").mkdir(parents=True)
    (results / provenance.PROVENANCE).write_text("{}")
    ladder, models = ["perceiver_io", "nac-scale_free"], tmp_path / "models"
    assert build._learned_graphs(ladder, 0, results / "metrics", models) is None
    (results / build.GRAPHS).write_text(json.dumps({"scale_free": [[1.0, 0.5], [0.5, 1.0]]}))
    graphs = build._learned_graphs(ladder, 0, results / "metrics", models)
    assert list(graphs) == ["scale_free"] and graphs["scale_free"].shape == (2, 2)


@pytest.mark.slow  # three report builds, about 70 s here
def test_converged_results_beside_minis_never_mixed(tmp_path, monkeypatch):
    """Absent: the default report gains one line (no converged run, the command) and nothing else.
    Present: its own report under reports/converged/ from its own metrics, labelled with its
    profile, commit, machine and device, linked from the index; mini's tables stay mini's."""
    metrics = write_metrics(tmp_path)
    monkeypatch.chdir(tmp_path)
    calls = []
    _stub_image_and_claims(monkeypatch, calls)
    reports = tmp_path / "reports"
    build.build_report(_params(), out=reports, metrics=metrics, converged=None, root=tmp_path)
    without = (reports / "README.md").read_text()
    mini_table2 = (reports / "tables" / "table2.csv").read_text()
    build.build_report(_params(), out=reports, metrics=metrics, root=tmp_path)  # results/converged/ absent
    absent = (reports / "README.md").read_text()
    line = next(x for x in absent.splitlines() if x.startswith("No converged run is committed"))
    assert provenance.COMMAND in line and "converged" not in without
    assert absent.replace(f"\n{line}\n", "", 1) == without  # that one line (and its blank line) only
    assert not (reports / "converged").exists()

    results = _converged_results(tmp_path)
    build.build_report(_params(), out=reports, metrics=metrics, root=tmp_path)
    index = (reports / "README.md").read_text()
    assert "No converged run" not in index and "[converged/README.md](converged/README.md)" in index
    for label in ("**converged**", "`0123456`", "gpu-host (Linux)", "1 x NVIDIA H100 80GB HBM3"):
        assert label in index, label
    conv = (reports / "converged" / "README.md").read_text()
    conv_reference = (reports / "converged" / "reference.md").read_text()  # its provenance, on its own page
    assert "Profile **converged**" in conv and "Device: 1 x NVIDIA H100 80GB HBM3." in conv_reference
    assert "converged/README.md" not in conv and "No converged run" not in conv  # no section of its own
    assert "Device:" not in index.split("\n")[8]  # mini's own provenance line is unchanged
    # the converged report read its own metrics only; mini's tables are mini's
    assert [c[0].resolve() for c in calls[-2:]] == [results / "metrics", metrics]
    assert (reports / "tables" / "table2.csv").read_text() == mini_table2
    assert (reports / "converged" / "tables" / "table2.csv").read_text() != mini_table2
    # its headline goes beside its report: the kept result set is not rewritten
    assert (reports / "converged" / "tables" / "headline.json").exists()
    assert not (results / "metrics" / "summary.json").exists()


def test_no_converged_run_is_one_line_with_its_command(tmp_path):
    line = build._converged(tmp_path / "results" / "converged", tmp_path / "reports", tmp_path)
    assert line.startswith("No converged run is committed") and "\n" not in line
    assert provenance.COMMAND in line and not (tmp_path / "reports").exists()


def _throughput_results(cpu_clock: bool) -> dict:
    rng = np.random.default_rng(0)
    rows = []
    for frac in (0.0, 0.25, 0.5, 0.75, 0.875):
        row = {"dropped_fraction": frac, "kept_modules": int(256 * (1 - frac))}
        for kind, base in (("executor", 10.0), ("whole", 8.0)):
            vals = base / (1 - frac + 0.05) * (1 + 0.05 * rng.standard_normal(4))
            iv = {
                "mean": float(vals.mean()),
                "lo": float(vals.min()),
                "hi": float(vals.max()),
                "n": 4,
                "values": vals.tolist(),
            }
            row[f"{kind}_images_per_s"] = iv
            if cpu_clock:
                row[f"{kind}_images_per_cpu_s"] = iv
        rows.append(row)
    return {
        "machine": {"cpu": "x86_64", "threads": 1, "torch": "2.x", "repeats": 4, "date": "2026-01-01"},
        "figure5b_paper_size": {
            "n_processor": 256,
            "batch": 32,
            "image_size": 64,
            "tokenizer": {"kind": "convnext"},
            "rows": rows,
        },
    }


@pytest.mark.parametrize("cpu_clock", [True, False])
def test_figure_5b_paper_size_is_drawn_from_the_bench_results(tmp_path, cpu_clock):
    results = json.loads(json.dumps(_throughput_results(cpu_clock)))  # as read back from the JSON file
    paths = bench_figures.figure_5b_paper_size(results, tmp_path)
    assert [p.name for p in paths] == ["figure5b_paper_size_throughput.png", "figure5b_paper_size_throughput.svg"]
    svg = paths[1].read_text()
    assert paths[0].stat().st_size > 1000 and "paper-size model, untrained weights, this CPU" in svg
    assert ("images per CPU-second" in svg) == cpu_clock


def test_convergence_figure_and_table_from_bench_results(tmp_path):
    from nac.report import build, sections

    run = lambda accs, ood=None: {"val_acc1": accs, **({"eval": {"ood_acc1": ood}} if ood is not None else {})}  # noqa: E731
    conv = {
        "mini_epochs": 3,
        "profile": "mini",
        "runs": {
            "perceiver_io": {
                "8": {
                    "0": run([10, 20, 30, 40, 50, 55, 58, 60], 30.0),
                    "1": run([10, 20, 30, 40, 50, 55, 58, 62], 32.0),
                }
            },
            "nac-scale_free": {
                "8": {
                    "0": {
                        "val_acc1": [11, 22, 33, 44, 55, 60, 64, 66],
                        "eval": {"ood_acc1": 35.0, "iid_acc1": 66.0, "iid_acc1_dense": 64.5},
                        "mechanism": {"final": {"sparsity": 0.9}},
                    }
                },
                "16": {"0": run(list(range(50, 66)), 40.0)},
            },
        },
    }
    hist = lambda accs: [{"val_acc1": a} for a in accs]  # noqa: E731
    histories = {"perceiver_io": [hist([10, 20, 25]), hist([12, 18, 27])], "nac-scale_free": [hist([11, 21, 26])]}
    paths = bench_figures.figure_convergence(conv, histories, {}, tmp_path)
    assert paths and all(p.exists() and p.stat().st_size > 0 for p in paths)
    assert "8 epochs (2 seeds)" in paths[1].read_text()
    table = sections.convergence_table(conv, histories).set_index("model")
    pio = table.loc[build.RUN_LABELS.get("perceiver_io", "perceiver_io")]
    ci = stats.t.ppf(0.975, 1) * np.std([25, 27], ddof=1) / np.sqrt(2)
    assert pio["this pipeline: val Acc@1 after 3 epochs"] == f"26.00 ± {ci:.2f} (2 seeds)"
    assert pio["its gain over the last epoch"] == 7.0  # (5 + 9) / 2
    assert pio["8 epochs: val Acc@1"].startswith("61.00 ± ") and pio["8 epochs: OOD Acc@1"].startswith("31.00 ± ")
    nac = table.loc[build.RUN_LABELS.get("nac-scale_free", "nac-scale_free")]
    assert nac["8 epochs: val Acc@1"] == "66.00 (1 seed)" and nac["8 epochs: OOD Acc@1"] == "35.00 (1 seed)"
    assert nac["8 epochs: kernel − dense attention (IID Acc@1)"] == "1.50 (1 seed)"
    assert pio["8 epochs: kernel − dense attention (IID Acc@1)"] == "—"
    assert nac["8 epochs: links with P = 0 (%)"] == "90.00 (1 seed)" and pio["8 epochs: links with P = 0 (%)"] == "—"
    assert nac["16 epochs: OOD Acc@1"] == "40.00 (1 seed)" and pio["16 epochs: val Acc@1"] == "—"
    assert not table.isna().any().any() and "nan" not in table.to_markdown().lower()


def test_the_discrepancies_come_from_their_file_in_order(tmp_path, monkeypatch):
    """``discrepancies.yaml`` is read in order as (topic, text); an entry without its two fields is an
    error naming the file and the entry, not a silently short Discrepancies section."""
    from nac.report import published

    rows = published.discrepancies()
    assert len(rows) > 10 and all(topic and text for topic, text in rows)
    bad = tmp_path / "discrepancies.yaml"
    bad.write_text("- topic: A\n  text: >-\n    one\n    two.\n- topic: B\n")
    monkeypatch.setattr(published, "DISCREPANCIES_FILE", bad)
    with pytest.raises(ValueError, match=r"discrepancies.yaml: entry 1 must have exactly"):
        published.discrepancies()
    bad.write_text("- topic: A\n  text: >-\n    one\n    two.\n")
    assert published.discrepancies() == [("A", "one two.")]  # folded lines join with one space


def test_the_readme_template_refuses_a_missing_value():
    """A name the template uses but the build does not pass raises (StrictUndefined) instead of
    rendering an empty table into reports/README.md."""
    import jinja2

    with pytest.raises(jinja2.UndefinedError, match="counts"):
        build.TEMPLATES.get_template("README.md.j2").render(
            p={"profile": "x", "commit": "c", "date": "d", "machine": "m", "torch": "t"}, md={}, params={"seeds": [0]}
        )


def test_binomial_se_is_the_textbook_formula_and_refuses_bad_input():
    from nac.stats import binomial_se

    assert binomial_se(50.0, 10_000) == pytest.approx(0.5)  # 100 sqrt(0.25 / 10,000)
    assert binomial_se(90.0, 100) == pytest.approx(3.0)  # 100 sqrt(0.09 / 100)
    assert binomial_se(0.0, 7) == 0.0 and binomial_se(100.0, 7) == 0.0
    for acc, n in ((50.0, 0), (50.0, 2.5), (50.0, True), (-1.0, 10), (100.5, 10)):
        with pytest.raises(ValueError, match="binomial_se"):
            binomial_se(acc, n)


def test_table1_gives_each_accuracy_its_binomial_se_beside_the_seed_ci():
    evals = [
        {"run": run, "seed": s, "iid_acc1": a, "iid_acc5": 90.0, "ood_acc1": a / 2, "ood_acc5": 60.0,
         "iid_n": 10_000, "ood_n": 2_500}
        for run, base in (("perceiver_io", 58.0), ("nac-scale_free", 60.0))
        for s, a in enumerate((base, base + 2.0, base - 1.0))
    ]  # fmt: skip
    display, numeric = tables.table1(evals, ["perceiver_io", "nac-scale_free"])
    s = summarize([58.0, 60.0, 57.0])
    iid_se, ood_se = 100 * (0.5833333 * 0.4166667 / 10_000) ** 0.5, 100 * (0.2916667 * 0.7083333 / 2_500) ** 0.5
    cell = display.set_index("model").loc["Perceiver IO"]
    assert cell["IID Acc@1"] == f"{s['mean']:.2f} ± {s['ci95']:.2f} (SE {iid_se:.2f})"
    assert cell["OOD Acc@1"].endswith(f"(SE {ood_se:.2f})")
    row = numeric.set_index(["run", "metric"]).loc[("perceiver_io", "ood_acc1")]
    assert row["test_n"] == 2_500 and row["binomial_se"] == pytest.approx(ood_se, rel=1e-5)
    evals[1]["iid_n"] = 1_000  # one run measured on another test set: a clear error, not a mixed SE
    with pytest.raises(ValueError, match="different sizes"):
        tables.table1(evals, ["perceiver_io", "nac-scale_free"])
