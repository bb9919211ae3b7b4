"""The findings screen (nac/report/findings.yaml, findings.py) and the figure rules: every registered
claim has its plain words, paper number and control; the committed report's findings screen lists
every claim in one verdict vocabulary with its numbers; the figures drawn from the committed
metrics keep at most 8 series per panel, no colour twice in a panel, and a caption naming profile,
seeds and model version."""

import json
import re
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest
import yaml

from nac import metrics_io
from nac.report import bench_figures, figures, findings, graph_figures
from nac.report.claims import VERDICTS, claim_ids, evaluate_claims, registered
from nac.report.published import RUN_LABELS, TRACK_RUN_LABELS
from nac.report.style import setup

ROOT = Path(__file__).resolve().parents[1]
CAPTION = "profile mini, seeds 0, 1, 2, model version abc1234"
MAX_SERIES = 8


def _params() -> dict:
    return yaml.safe_load((ROOT / "params.yaml").read_text())


def test_every_registered_claim_has_a_findings_entry():
    entries = findings.load()
    names = [c.name for c in registered()]
    assert sorted(set(names) - set(entries)) == [], "claims without words, paper, unit and control in findings.yaml"
    assert sorted(set(entries) - set(names)) == [], "findings.yaml entries that name no registered claim"
    for cid in claim_ids(_params()):  # a claim registered per key gets its key in its words
        e = findings.entry_for(cid, entries, names)
        assert e["words"] and "{" not in e["words"] and e["control"], cid


def test_the_paper_numbers_of_the_screen_are_the_claims_own(tmp_path):
    """Every number in an entry's `paper` appears in the claim's own paper text (published.py's numbers,
    through the registry), so the screen cannot drift from the claim it summarises."""
    entries, names = findings.load(), [c.name for c in registered()]
    for r in evaluate_claims(_params(), tmp_path / "nothing"):
        short = findings.entry_for(r["id"], entries, names)["paper"]
        missing = findings.paper_numbers(short) - findings.paper_numbers(r["paper"])
        assert not missing, (r["id"], short, r["paper"])


def test_a_bad_entry_is_refused_with_its_name(tmp_path):
    bad = tmp_path / "f.yaml"
    bad.write_text("iid_gain: {words: w, paper: p, unit: furlongs, control: c}\n")
    with pytest.raises(ValueError, match="iid_gain.*furlongs"):
        findings.load(bad)
    bad.write_text("iid_gain: {words: w}\n")
    with pytest.raises(ValueError, match="iid_gain.*exactly"):
        findings.load(bad)


def test_ours_text_and_a_control_the_result_names():
    row = {"estimate": 1.5, "lo": 0.5, "hi": 2.5, "n": 3}
    assert findings.ours_text(row, "pts") == "+1.5 [+0.5, +2.5] pts, n = 3"
    assert (
        findings.ours_text({**row, "estimate": 1.24, "lo": 1.2, "hi": 1.3, "n": 5}, "x") == "1.24 [1.20, 1.30]×, n = 5"
    )
    assert findings.ours_text({"estimate": 0.97, "lo": 0.97, "hi": 0.97, "n": 1}, "frac") == "0.97, n = 1"
    assert findings.ours_text({"estimate": None, "lo": None, "hi": None, "n": 0}, "pts") == "—"
    entry = {"control": "Perceiver IO"}
    assert findings.control_text({"controls": ["the empty graph"]}, entry) == "Perceiver IO; the empty graph"
    assert findings.control_text({}, entry) == "Perceiver IO"


def test_the_converged_column_appears_only_with_converged_rows():
    rows = [{"id": "iid_gain", "estimate": 1.0, "lo": 0.5, "hi": 1.5, "n": 3, "verdict": "supported"}]
    names = [c.name for c in registered()]
    assert "converged" not in findings.findings_table(rows, names, "mini")
    conv = [{"id": "iid_gain", "estimate": "2.0", "lo": "1.0", "hi": "3.0", "n": "5", "verdict": "supported"}]
    table = findings.findings_table(rows, names, "mini", conv)
    header = table.splitlines()[0]
    assert "+2.0 [+1.0, +3.0] pts, n = 5: **supported**" in table
    assert header.index("at the plateau (converged)") < header.index("ours (mini)")  # judged: first
    assert findings.converged_counts_line(conv + [{"id": "ood_gain", "verdict": "not judged"}]).startswith(
        "**At the plateau** (converged profile, judged from its pieces; [converged/claims.md](converged/claims.md)): "
        "1 supported, 0 not supported, 0 undecided, 0 not measured of the 1 claims judged so far; 1 wait for pieces"
    )
    waiting = [{**conv[0], "estimate": "", "lo": "", "hi": "", "n": "0", "verdict": "not judged"}]
    table = findings.findings_table(rows, names, "mini", waiting)
    header = table.splitlines()[0]
    assert "not judged yet" in table and header.index("ours (mini)") < header.index("at the plateau (converged)")
    assert findings.converged_counts_line(waiting) is None
    block = findings.readme_results(rows, names, "mini", [0, 1, 2], conv)
    assert block.splitlines()[1].startswith("**At the plateau** (converged profile, from its pieces, 1 of 1 claims")
    assert "NAC beats Perceiver IO in distribution: **supported** (+2.0 [+1.0, +3.0] pts, n = 5)" in block
    assert "At the plateau" not in findings.readme_results(rows, names, "mini", [0, 1, 2], waiting)
    # a record of an earlier benchmark: its own line, labelled, linking its claims
    block = findings.readme_results(rows, names, "mini", [0, 1, 2], None, records=[("benchmark1", "shapes", conv)])
    line = block.splitlines()[1]
    assert line.startswith("**At the plateau on an earlier benchmark** (the record of shapes; 1 of 1 claims judged")
    assert "reports/records/benchmark1/claims.md" in line and "**supported** (+2.0 [+1.0, +3.0] pts, n = 5)" in line
    with pytest.raises(ValueError, match="inconclusive"):
        findings.findings_table([{**rows[0], "verdict": "inconclusive"}], names, "mini")


def _findings_section(readme: str) -> str:
    return readme[readme.index("## Findings") : readme.index("\n## ", readme.index("## Findings") + 1)]


@pytest.mark.skipif(not (ROOT / "reports/README.md").is_file(), reason="no committed report in this checkout")
def test_the_committed_findings_screen():
    """The top of the committed reports/README.md: every claim in report order, each with a verdict of
    the one vocabulary, a paper entry, a number with its n where measured, and a control; one screen."""
    readme = (ROOT / "reports/README.md").read_text()
    section = _findings_section(readme)
    rows = [line for line in section.splitlines() if "claims.md#" in line]
    ids = [re.search(r"claims\.md#(\w+)", line).group(1) for line in rows]
    assert ids == list(claim_ids(_params()))
    header = next(line for line in section.splitlines() if line.startswith("| claim"))
    cols = [c.strip() for c in header.strip("|").split("|")]
    verdict_col = next(c for c in cols if c.startswith("verdict"))
    ours_col = next(c for c in cols if c.startswith("ours ("))
    plateau = [c for c in cols if c.startswith("at the plateau")]
    assert cols[0] == "claim" and cols[1] == "paper" and cols[-1] == "judged against"
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        verdict = cells[cols.index(verdict_col)].strip("*")
        assert verdict in VERDICTS, line
        for c in plateau:  # converged: a verdict of the same vocabulary, or waiting for pieces
            got = cells[cols.index(c)]
            plateau_only = got == "no such claim at the plateau (no runs longer than its own)"
            assert got == "not judged yet" or plateau_only or any(got.endswith(f"**{v}**") for v in VERDICTS), line
        ours = cells[cols.index(ours_col)]
        assert (ours == "—") == (verdict == "not measured"), line
        if verdict != "not measured":
            assert re.search(r"\d", ours) and re.search(r"n = \d+", ours), line
        assert cells[1] and cells[-1], line
    assert "inconclusive" not in readme.lower()
    top = readme[: readme.index("## Findings")].count("\n")
    assert top < 8 and len(section.splitlines()) <= len(rows) + 12  # the findings open the page, one screen
    assert [c for c in ("switch by switch", "## Discrepancies") if c in readme.split("## Findings")[1]] == [
        "switch by switch"
    ]  # engineering only linked (reference.md), never inline


@pytest.mark.skipif(not (ROOT / "metrics/claims.json").is_file(), reason="no committed metrics in this checkout")
def test_the_committed_claims_metrics_hold_every_claim():
    got = json.loads((ROOT / "metrics/claims.json").read_text())
    assert set(got) == set(claim_ids(_params()))
    for cid, m in got.items():
        keys = {"estimate", "lo", "hi", "n", "verdict", "deciding", "detectable", "needed", "effect", "sensitivity"}
        assert set(m) == keys and m["verdict"] in VERDICTS, cid
        if m["sensitivity"] is not None:  # the run gate: the claim judged without the flagged runs' seeds
            assert set(m["sensitivity"]) == {"estimate", "lo", "hi", "n", "verdict", "without"}, cid
        if m["verdict"] != "not measured":  # the deciding test's interval (issue 46)
            assert set(m["deciding"]) == {"estimate", "lo", "hi", "n", "test"}, cid
    summary = json.loads((ROOT / "metrics/summary.json").read_text())
    counts = {k: summary[k] for k in ("supported", "not_supported", "undecided", "not_measured")}
    assert sum(counts.values()) == len(got)


# ---------------------------------------------------------------------------- the figure rules
@pytest.fixture
def drawn(monkeypatch, tmp_path):
    """The figures drawn, kept open: each figure module's ``save`` records (name, figure) instead of writing."""
    setup()
    got: list[tuple[str, plt.Figure]] = []
    for module in (figures, graph_figures, bench_figures):
        monkeypatch.setattr(module, "save", lambda fig, out_dir, name: got.append((name, fig)) or [tmp_path / name])
    yield got
    for _, fig in got:
        plt.close(fig)


def _check_rules(name: str, fig) -> None:
    texts = [fig._suptitle.get_text() if fig._suptitle else ""] + [ax.get_title() for ax in fig.axes]
    assert any(CAPTION in t for t in texts), f"{name}: no caption naming profile, seeds and model version"
    for ax in fig.axes:
        lines = [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]
        series = [ln for ln in lines if len(ln.get_xdata()) > 2]  # reference lines (thresholds) are not series
        assert len(series) <= MAX_SERIES, f"{name}, panel {ax.get_title()!r}: {len(series)} series"
        colours = [tuple(plt.matplotlib.colors.to_rgba(ln.get_color())) for ln in series]
        assert len(colours) == len(set(colours)), f"{name}, panel {ax.get_title()!r}: a colour twice"


@pytest.mark.skipif(not (ROOT / "metrics/image/prune.json").is_file(), reason="no committed metrics")
def test_the_figures_keep_the_rules(drawn, tmp_path):
    params = _params()
    seeds, ladder = params["seeds"], params["image"]["ladder"]
    runs = params["prune"]["runs"]
    prune = pd.DataFrame(metrics_io.prune_rows(ROOT / "metrics/image/prune.json", runs, seeds))
    figures.figure5a(prune, tmp_path, runs, "nac-scale_free", caption=CAPTION)
    figures.figure5b(prune, tmp_path, runs, "CPU", caption=CAPTION)
    figures.figure15(prune, tmp_path, runs, caption=CAPTION)
    trains = metrics_io.image_runs(ROOT / "metrics", "train", ladder, seeds)
    figures.learning_curves({r: [t["history"] for t in trains if t["run"] == r] for r in ladder}, tmp_path, CAPTION)
    histories, chance = {}, {}
    for track in ("points", "listops", "text", "nlvr"):
        res = metrics_io.track_runs(ROOT / "metrics", track, params[track]["runs"], seeds)
        histories[track] = {r: [x["history"] for x in res if x["run"] == r] for r in params[track]["runs"]}
        chance[track] = 50.0
    figures.learning_curves_tracks(histories, chance, {}, TRACK_RUN_LABELS, tmp_path, caption=CAPTION)
    fs = params["fewshot"]
    rows = {t: pd.DataFrame(f["rows"]) for t, f in metrics_io.fewshot_targets(ROOT / "metrics", fs["targets"]).items()}
    labels = {"perceiver_io": "Perceiver IO", "nac": "NAC"}
    figures.figure4(rows, sorted(fs["protocol"]["shots"]), fs["protocol"]["ways"], labels, tmp_path, caption=CAPTION)
    embedding = metrics_io.nlvr_embedding(ROOT / "metrics/nlvr/embedding.csv")
    graph_figures.figure6(
        embedding, metrics_io.nlvr_examples(ROOT / "metrics/nlvr/examples.json"), tmp_path, caption=CAPTION
    )
    assert [n for n, _ in drawn] == [
        "figure5a_prune_accuracy",
        "figure5b_prune_throughput",
        "figure15_prune_relative",
        "learning_curves_image",
        "learning_curves_tracks",
        "figure4_fewshot",
        "figure6_nlvr_circuits",
    ]
    for name, fig in drawn:
        _check_rules(name, fig)
    # Figure 5b plots the ratio the claim is about: every curve starts at 1x (the undropped model)
    ax = drawn[1][1].axes[0]
    assert all(abs(ln.get_ydata()[0] - 1.0) < 1e-9 for ln in ax.get_lines() if ln.get_label() in RUN_LABELS.values())
    assert any(ln.get_label().startswith("~8×") for ln in ax.get_lines())  # the claim's threshold drawn


def test_the_rule_check_catches_a_crowded_panel(drawn, tmp_path):
    fig, ax = plt.subplots()
    for k in range(9):
        ax.plot([0, 1, 2], [k, k, k], label=f"run {k}")
    fig.suptitle(CAPTION)
    with pytest.raises(AssertionError, match="9 series"):
        _check_rules("crowded", fig)
    plt.close(fig)


@pytest.mark.skipif(not (ROOT / "reports/tables/claims.csv").is_file(), reason="no committed report")
def test_the_readme_results_follow_the_committed_report():
    """README.md's results block is the committed report's, every verdict class present with its
    claims (failures included); after a rerun, `python tools/readme_results.py` rewrites it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("readme_results", ROOT / "tools/readme_results.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    readme = (ROOT / "README.md").read_text()
    assert findings.replace_block(readme, tool.block()) == readme, "stale: run `python tools/readme_results.py`"
    rows = findings.read_rows(ROOT / "reports/tables/claims.csv")
    got = readme[readme.index(findings.README_BEGIN) : readme.index(findings.README_END)]
    for v in {r["verdict"] for r in rows}:
        assert f"- **{v[0].upper() + v[1:]}" in got, v


def test_dvc_exp_show_fits_80_columns():
    """The documented comparison (docs/pipeline.md) keeps the Experiment column and summary.json's
    top-level counts; DVC pads each column by 3 and draws 2 border characters: under 80 columns."""
    from nac.report.claims import headline

    rows = [{"id": "x", "verdict": v, "estimate": None, "lo": None, "hi": None, "n": 0} for v in VERDICTS]
    top = [k for k, v in headline(rows).items() if not isinstance(v, dict)]
    assert top == [v.replace(" ", "_") for v in VERDICTS]
    doc = (ROOT / "docs/pipeline.md").read_text()
    command = f"--keep '^(Experiment|{'|'.join(top)})$'"
    assert command in doc, "docs/pipeline.md documents another comparison command"
    width = 2 + sum(max(len(c), len("workspace")) + 3 for c in ["Experiment", *top])
    assert width <= 80, width


def test_figure3_draws_an_empty_learned_graph_without_a_colour_bar(drawn, tmp_path):
    import numpy as np

    n = 8
    full = np.full((n, n), 0.5, dtype=np.float32)
    graph_figures.figure3(
        {"scale_free": np.zeros((n, n), np.float32), "erdos_renyi": full}, n, tmp_path, caption=CAPTION
    )
    (_, fig) = drawn[0]
    _check_rules("figure3", fig)
    panels = {ax.get_title().split(":")[0]: ax for ax in fig.axes if ax.get_title()}
    empty = panels["learned by NAC (Scale-free)"]
    assert [t.get_text() for t in empty.texts] == ["no link kept"]
    bars = [ax for ax in fig.axes if ax.get_ylabel() == "degree"]
    graphs = [ax for ax in fig.axes if "prior sample" in ax.get_title() or "learned by" in ax.get_title()]
    assert len(bars) == len([ax for ax in graphs if not ax.texts]) >= 2  # a colour bar only where links are drawn
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert sum("no checkpoint here" in t for t in texts) == 2  # the two priors without a learned graph say so


@pytest.mark.skipif(not (ROOT / "bench/results/convergence.json").is_file(), reason="no convergence runs")
def test_the_convergence_figure_says_whose_runs_it_draws(drawn, tmp_path):
    conv = json.loads((ROOT / "bench/results/convergence.json").read_text())
    bench_figures.figure_convergence(conv, {}, RUN_LABELS, tmp_path, current=False, caption=CAPTION)
    (_, fig) = drawn[0]
    _check_rules("convergence", fig)
    labels = [ln.get_label() for ax in fig.axes for ln in ax.get_lines() if not ln.get_label().startswith("_")]
    assert labels and all(lab.startswith("earlier model") for lab in labels)
    assert "earlier model (template=nac_v1)" in fig._suptitle.get_text()
