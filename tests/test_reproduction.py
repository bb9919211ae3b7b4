"""Issue 36, case 9: ``reports/reproduction.md`` compares this run with the committed one (git HEAD):
per claim the difference, whether it lies in the committed CI, whether the verdict changed; per
image run the Acc@1 differences. On the old report nothing compared them: a run in another
environment overwrote the committed numbers without a word."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from nac.pipeline.stage_params import keys, project
from nac.report import reproduction

PARAMS = {
    "profile": "smoke",
    "seeds": [0],
    "prior": {"name": "scale_free"},
    "image": {"ladder": ["modfc"], "dataset": "shapes", "ood_dataset": "shapes_r"},
    **{t: {"dataset": d} for t, d in (("points", "pc"), ("listops", "lo"), ("text", "by"), ("nlvr", "nl"))},
    "data": {"root": "data", "shapes": {"n": 1}, "shapes_r": {"n": 2}, "pc": {"n": 3}, "lo": {}, "by": {}, "nl": {}},
}


def _rows(**changes):
    rows = [
        {"id": "ood_gain", "estimate": 1.0, "lo": -1.0, "hi": 3.0, "verdict": "inconclusive"},
        {"id": "text_gap", "estimate": -2.0, "lo": -3.0, "hi": -1.0, "verdict": "not supported"},
    ]
    for r in rows:
        r.update(changes.get(r["id"], {}))
    return rows


def _locked(params: dict) -> dict:
    """What DVC records in dvc.lock for the report stage: each declared key's value, dotted (an
    older lock lacks ``data.root``: a key read only since is not compared)."""
    out = {}
    for key in keys("report", params):
        node = params
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None and key != "data.root":
            out[key] = node
    return out


@pytest.fixture
def committed_run(tmp_path, monkeypatch):
    """A git checkout whose HEAD holds a finished run: params, claims, one image run's metrics."""
    import yaml

    (tmp_path / "reports/tables").mkdir(parents=True)
    (tmp_path / "metrics/image/eval").mkdir(parents=True)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(PARAMS), encoding="utf-8")
    lock = {"stages": {"report": {"params": {"params.yaml": _locked(PARAMS)}}}}
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(lock), encoding="utf-8")
    pd.DataFrame(_rows()).to_csv(tmp_path / "reports/tables/claims.csv", index=False)
    (tmp_path / "metrics/image/eval/modfc-0.json").write_text(json.dumps({"iid_acc1": 50.0, "ood_acc1": 40.0}))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@e.invalid"]
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([*git, "add", "-A"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "run"], cwd=tmp_path, check=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_rerun_in_another_environment_is_compared_claim_by_claim(committed_run):
    """This run: ``ood_gain`` moved inside the CI with the same verdict, ``text_gap`` moved outside
    it and flipped; the image run moved by +1.5 / -0.5 points (the metrics overwritten in place, as
    ``dvc repro`` does: the committed values still come from git HEAD)."""
    (committed_run / "metrics/image/eval/modfc-0.json").write_text(json.dumps({"iid_acc1": 51.5, "ood_acc1": 39.5}))
    rows = _rows(ood_gain={"estimate": 1.5}, text_gap={"estimate": 0.5, "verdict": "inconclusive"})
    text = reproduction.page(project(PARAMS, "report"), rows, "metrics", committed_run)
    assert "**1 of 2 verdicts changed** (`text_gap` not supported → inconclusive)" in text
    assert "1 estimate(s) outside the committed 95% CI" in text
    assert "1 of 1 image runs differ in accuracy (mean |difference| 1.00 points, at most 1.50)" in text
    assert "| `ood_gain` | 1.00 [-1.00, 3.00] | 1.50 | +0.50 | yes | inconclusive | inconclusive |" in text
    assert "| `text_gap` | -2.00 [-3.00, -1.00] | 0.50 | +2.50 | **no** | not supported | **inconclusive** |" in text
    assert "| `modfc-0` | +1.50 | -0.50 |" in text


def test_the_same_run_is_reported_identical(committed_run):
    text = reproduction.page(project(PARAMS, "report"), _rows(), "metrics", committed_run)
    assert (
        "**0 of 2 verdicts changed**; 0 estimate(s) outside" in text and "0 of 1 image runs differ in accuracy" in text
    )
    assert "0 of 2 metric numbers differ" in text


def test_every_metric_is_compared_not_the_accuracies_alone(committed_run):
    """Issue 47: equal accuracies, but a mechanism distance in the fourth decimal and the NLVR kNN
    moved: the page names both files, how many numbers and by how much; a timing that moved is no
    difference."""
    train = committed_run / "metrics/image/train/modfc-0.json"
    nlvr = committed_run / "metrics/nlvr/analysis.json"
    for f in (train, nlvr):
        f.parent.mkdir(parents=True, exist_ok=True)
    train.write_text(json.dumps({"mechanism": {"final": {"distance": {"scale_free": 0.123444}}}, "images_per_s": 9.0}))
    nlvr.write_text(json.dumps({"knn_shuffled": 26.0, "knn_shuffled_ci95": 1.2}))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@e.invalid"]
    subprocess.run([*git, "add", "-A"], cwd=committed_run, check=True)
    subprocess.run([*git, "commit", "-qm", "more"], cwd=committed_run, check=True)
    train.write_text(json.dumps({"mechanism": {"final": {"distance": {"scale_free": 0.123372}}}, "images_per_s": 12.0}))
    nlvr.write_text(json.dumps({"knn_shuffled": 25.92, "knn_shuffled_ci95": 1.03}))
    every = reproduction.compare_all("metrics", committed_run)
    keys = {(d["file"], d["key"]) for d in every["differ"]}
    assert keys == {
        ("image/train/modfc-0.json", "mechanism.final.distance.scale_free"),
        ("nlvr/analysis.json", "knn_shuffled"),
        ("nlvr/analysis.json", "knn_shuffled_ci95"),
    }
    text = reproduction.page(project(PARAMS, "report"), _rows(), "metrics", committed_run)
    assert "0 of 1 image runs differ in accuracy; 3 of 5 metric numbers differ" in text
    assert "| `nlvr/analysis.json` | 2 | -0.17 (`knn_shuffled_ci95`) |" in text
    assert "| `image/train/modfc-0.json` | 1 | -7.2e-05 (`mechanism.final.distance.scale_free`) |" in text


def test_a_setting_added_to_a_section_since_is_not_a_difference():
    """A key the committed section does not hold (``train.cuda_graphs``, added at its default) is not
    compared, as a key the committed lock does not hold is not; a changed or removed one is."""
    then = {"epochs": 6, "compile": False}
    assert not reproduction._differs({"epochs": 6, "compile": False, "cuda_graphs": False}, then)
    assert reproduction._differs({"epochs": 7, "compile": False, "cuda_graphs": False}, then)
    assert reproduction._differs({"epochs": 6}, then)


def test_a_run_with_other_params_is_not_compared(committed_run):
    other = {**PARAMS, "profile": "mini"}
    text = reproduction.page(project(other, "report"), _rows(), "metrics", committed_run)
    assert "Not compared: this run's params differ from those the committed report ran with" in text
    assert text.rstrip().endswith("in profile.")
    assert "## Claims" not in text


def test_no_committed_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = reproduction.page(PARAMS, _rows(), "metrics", tmp_path)
    assert "No committed run to compare with" in text


def test_the_report_writes_the_page_and_provenance_holds_every_package(tmp_path, monkeypatch):
    """The hook: ``build_report`` writes ``reproduction.md`` with the rest of the report (swapped in
    together) and dvc.yaml declares it; the provenance lists every installed package's version."""
    import yaml
    from test_report import _params, _stub_image_and_claims, write_metrics

    from nac.report import build

    metrics = write_metrics(tmp_path)
    monkeypatch.chdir(tmp_path)
    _stub_image_and_claims(monkeypatch, [])
    summary = build.build_report(_params(), out=tmp_path / "reports", metrics=metrics, root=tmp_path)
    page = (tmp_path / "reports" / "reproduction.md").read_text(encoding="utf-8")
    assert page.startswith("# Reproduction check") and "No committed run to compare with" in page  # no git here
    assert "torch" in summary["provenance"]["packages"] and "numpy" in summary["provenance"]["packages"]
    outs = yaml.safe_load(Path(__file__).resolve().parents[1].joinpath("dvc.yaml").read_text())["stages"]["report"]
    assert any(isinstance(o, dict) and "reports/reproduction.md" in o for o in outs["outs"])


def test_the_committed_lock_is_read_as_dvc_writes_it(monkeypatch, tmp_path):
    """dvc.lock is YAML 1.2 (DVC writes ``min_lr: 1e-05``): read with PyYAML's YAML 1.1 that value
    was the string '1e-05', so every committed run differed from itself in ``image.train`` and the
    page said "not compared"; the committed repository's own run is compared now."""
    lock = "stages:\n  report:\n    params:\n      params.yaml:\n        image.train:\n          min_lr: 1e-05\n"
    monkeypatch.setattr(reproduction, "committed", lambda rel, root=".": lock)
    assert reproduction.committed_params() == {"image.train": {"min_lr": 1e-05}}
    monkeypatch.undo()
    from nac.pipeline.params import read_params

    root = Path(__file__).resolve().parents[1]  # HEAD's dvc.lock against HEAD's params.yaml
    (tmp_path / "params.yaml").write_text(reproduction.committed("params.yaml", root), encoding="utf-8")
    then = reproduction.committed_params(root)
    assert then and reproduction.params_differ(read_params(tmp_path / "params.yaml"), then) == []
