"""Issue 50, item 4: the report shows why the Modular Network ends near 40%, by the readings fixed in
``bench/modular_network_controls.py`` before its controls ran (``nac.report.modular_network``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nac.report import modular_network as mn

ROOT = Path(__file__).resolve().parents[1]


def _data(**iid):
    """Controls at the given IID Acc@1 (train accuracy 50 unless ``<name>_train``), piece at 39.3."""
    controls = {
        k: {"iid_acc1": v, "train_acc": iid.get(f"{k}_train", 50.0), "epochs": 192 if k == "long" else 96}
        for k, v in iid.items()
        if not k.endswith("_train")
    }
    return {"controls": controls, "seed0": 39.3, "train_n": 4000}


def test_each_reading_applies_its_threshold():
    held = mn.verdicts(_data(libmodular=54.3))
    assert "our settings hold the baseline back" in held[0] and held[-1] == "Shown: settings."
    assert "do not hold it back" in mn.verdicts(_data(libmodular=54.2))[0]
    assert mn.verdicts(_data(plain_cnn=44.3))[-1] == "Shown: capacity."
    assert mn.verdicts(_data(plain_cnn=34.3))[-1] == "Shown: capacity."
    assert "capacity does not bound it" in mn.verdicts(_data(plain_cnn=44.4))[0]
    assert mn.verdicts(_data(long=44.3))[-1] == "Shown: length."
    assert "not a matter of length" in mn.verdicts(_data(long=44.2))[0]


def test_neither_shown_says_what_the_controls_show_and_what_is_not_measured():
    lines = mn.verdicts(_data(plain_cnn=60.4, libmodular=20.7, libmodular_train=92.4, libmodular_plain=58.8))
    assert lines[-1].startswith("None of the explanations fixed in advance is shown")
    assert "60.4, 58.8 IID at the converged length, with routing 39.3 and 20.7" in lines[-1]
    assert "4,000 training images" in lines[-1]
    assert "not measured yet (control `long`)" in lines[-1]
    assert "stored module choices, 92.4%" in lines[0]
    done = mn.verdicts(_data(plain_cnn=60.4, libmodular=20.7, long=40.0))
    assert "40% is this baseline's result on this data" in done[-1] and "not measured" not in done[-1]
    assert "too few controls" in mn.verdicts(_data(libmodular=20.7))[-1]
    longer = mn.verdicts(_data(plain_cnn=60.4, libmodular=20.7, long=48.3))
    assert longer[-2] == "Shown: length." and longer[-1].startswith("Beside that, without routing the same network")


def test_the_committed_controls_and_record_are_read(tmp_path, monkeypatch):
    """The committed record's five pieces and the committed controls: seed 0's IID is the piece's own
    number (39.3), not a copy; the section writes a figure and a table naming every control."""
    monkeypatch.chdir(ROOT)
    data = mn.read()
    if data is None:
        pytest.skip("no committed controls or record")
    piece = json.loads(
        (ROOT / "results/converged/records/benchmark1/pieces/converged/image/modular_network-0/eval.json").read_text()
    )
    assert data["seed0"] == piece["iid_acc1"] and sorted(data["pieces"]) == [0, 1, 2, 3, 4]
    assert data["test_n"] == 1000 and data["train_n"] == 4000
    md, figs = {}, {}
    mn.section(tmp_path, md, figs, ROOT / "results/converged")
    assert all(p.is_file() for p in figs["modular_network"])
    for name in data["controls"]:
        assert f"(`{name}`)" in md["modular_network"]


def test_absent_inputs_give_no_section(tmp_path):
    md, figs = {}, {}
    mn.section(tmp_path, md, figs, tmp_path / "no-results")
    assert "modular_network" not in md and not figs
