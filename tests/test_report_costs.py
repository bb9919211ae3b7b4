"""The report's cost section reads the benchmarks' committed results: the newest label with both
pairs, ratios computed from the counts, and a skipped line naming the command when a file is absent."""

import json
import re
from pathlib import Path

from nac.report import costs


def _run(ops, syncs=0, launches=None):
    out = {"ops_total": ops, "syncs_total": syncs}
    if launches is not None:
        out["compiled"] = {"launches_total": launches, "graphs": 1, "graph_breaks": 0, "recompiles": 0}
    return out


def test_step_ops_table_reads_the_newest_label_with_both_pairs():
    ops = {
        "machine": {"cpu": "x"},
        "old": {"tiny": {"perceiver_io": _run(100), "nac-scale_free": _run(300, 5)}, "imagenet": {}},
        "new": {
            "tiny": {"perceiver_io": _run(100, launches=50), "nac-scale_free": _run(150, launches=60)},
            "imagenet": {"perceiver_io": _run(200, launches=80), "nac": _run(260, launches=120)},
        },
        "mini": {"mini": {}},  # a label without both pairs is not the newest one
    }
    label, table = costs.step_ops_table(ops)
    assert label == "new"
    assert table["NAC / PIO"].tolist() == [1.5, 1.3]
    assert table["compiled NAC / PIO"].tolist() == [1.2, 1.5]
    assert table["host syncs (PIO, NAC)"].tolist() == ["0, 0", "0, 0"]


def test_step_ops_table_without_compiled_counts_has_eager_columns_only():
    ops = {
        "a": {
            "tiny": {"perceiver_io": _run(10), "nac": _run(20)},
            "imagenet": {"perceiver_io": _run(10), "nac": _run(30)},
        }
    }
    _, table = costs.step_ops_table(ops)
    assert table["NAC / PIO"].tolist() == [2.0, 3.0] and "compiled NAC / PIO" not in table


def test_cost_section_is_skipped_when_the_files_are_absent(tmp_path, monkeypatch):
    monkeypatch.setattr(costs, "OPS", tmp_path / "ops.json")
    monkeypatch.setattr(costs, "GPU", tmp_path / "gpu.json")
    assert costs.cost_section()["table"] is None and costs.cost_section()["gpu"] is None
    (tmp_path / "ops.json").write_text(
        json.dumps(
            {
                "x": {
                    "tiny": {"perceiver_io": _run(4), "nac": _run(6)},
                    "imagenet": {"perceiver_io": _run(4), "nac": _run(8)},
                }
            }
        )
    )
    section = costs.cost_section()
    assert section["label"] == "x" and "| 1.5 |" in re.sub(r" +", " ", section["table"])


def test_the_committed_benchmarks_fill_the_section(monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parent.parent)  # the repository's bench/results/
    section = costs.cost_section()
    assert section["label"] is not None and "Tiny-ImageNet" in section["table"]
    assert section["gpu"] is not None and "NAC / PIO" in section["gpu"]
