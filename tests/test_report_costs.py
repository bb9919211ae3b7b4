"""The report's cost section: the eager counts of the ``costs`` stage (this code) with the compiled
columns of the benchmark's newest label that has them, flagged when that label's eager counts are
not this code's, and a skipped line naming the command when a file is absent."""

import json
import re

from nac.repo import ROOT
from nac.report import costs


def _run(ops, syncs=0, launches=None):
    out = {"ops_total": ops, "syncs_total": syncs}
    if launches is not None:
        out["compiled"] = {"launches_total": launches, "graphs": 1, "graph_breaks": 0, "recompiles": 0}
    return out


STAGE = {
    "pairs": {
        "tiny": {"perceiver_io": _run(100), "nac-scale_free": _run(150)},
        "imagenet": {"perceiver_io": _run(200), "nac": _run(260)},
    }
}


def test_the_table_takes_eager_counts_from_the_stage_and_compiled_ones_from_the_newest_full_label():
    bench = {
        "machine": {"cpu": "x"},
        "old": {
            "tiny": {"perceiver_io": _run(100, launches=10), "nac-scale_free": _run(300, launches=99)},
            "imagenet": {"perceiver_io": _run(200, launches=10), "nac": _run(999, launches=99)},
        },
        "new": {
            "tiny": {"perceiver_io": _run(100, launches=50), "nac-scale_free": _run(150, launches=60)},
            "imagenet": {"perceiver_io": _run(200, launches=80), "nac": _run(270, launches=120)},
        },
        "eager_only": {  # newer, but without compiled counts: not the compiled columns' label
            "tiny": {"perceiver_io": _run(1), "nac-scale_free": _run(1)},
            "imagenet": {"perceiver_io": _run(1), "nac": _run(1)},
        },
        "mini": {"mini": {}},
    }
    label, table = costs.step_ops_table(STAGE, bench)
    assert label == "new"
    assert table["NAC / PIO"].tolist() == [1.5, 1.3]  # the stage's counts, not the labels'
    assert table["compiled NAC / PIO"].tolist() == [1.2, 1.5]
    assert table["host syncs (PIO, NAC)"].tolist() == ["0, 0", "0, 0"]
    # the label's eager counts: this code's for the Tiny pair, not for the ImageNet one
    assert table["compiled counted on this code"].tolist() == ["yes", "no (eager ops then: PIO 200, NAC 270)"]


def test_without_compiled_counts_the_table_has_eager_columns_only():
    label, table = costs.step_ops_table(STAGE, {"a": {"tiny": {"perceiver_io": _run(1)}}})
    assert label is None and table["NAC / PIO"].tolist() == [1.5, 1.3] and "compiled NAC / PIO" not in table


def test_cost_section_is_skipped_when_the_files_are_absent(tmp_path):
    section = costs.cost_section(tmp_path)
    assert section["table"] is None and section["gpu"] is None and section["label"] is None
    (tmp_path / costs.OPS).parent.mkdir(parents=True)
    (tmp_path / costs.OPS).write_text(json.dumps(STAGE))
    section = costs.cost_section(tmp_path)
    assert section["label"] is None and "| 1.5 |" in re.sub(r" +", " ", section["table"])


def test_the_committed_files_fill_the_section(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # read from the folder given, never the working directory
    section = costs.cost_section(ROOT)  # metrics/costs/ and bench/results/
    assert section["label"] is not None and section["label_date"] and "Tiny-ImageNet" in section["table"]
    assert section["gpu"] is not None and "NAC / PIO" in section["gpu"]
